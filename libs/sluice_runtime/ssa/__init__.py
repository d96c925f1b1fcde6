"""Server-side apply of a set of manifests, the way Flux's `ssa` package does it.

The kustomize-controller (and later ResourceSet) hands over a built set of
objects and needs to know, per object, whether it was created, configured,
left unchanged or skipped, so it can record an inventory, emit one event
listing real changes and prune what left the set. One module per concern,
as fluxcd/pkg/ssa has one file per verb:

- `changeset`: the data every verb returns (actions, entries, change sets,
  previews), each object carried as one `ObjectRef` (id + resolved resource);
- `errors`: `ApplyFailed` and friends, and when the API calls a change immutable;
- `policy`: the per-object annotations (`ssa`, `force`, `reconcile`, `prune`);
- `normalizing`: pure rules over manifests: validation, drift, stages, defaults;
- `managed_fields`: taking over kubectl's fields (`ssa: Override`);
- `checking`: reading and dry-running (`dry_run_all`, `preview_all`);
- `applying`: the staged apply; `deleting`: prune; `manager`: the
  `ResourceManager` that holds them together, and the health bridge.

Every request goes through the client given, which may impersonate a
tenant: RBAC decides, and a 403 is reported against the object.
"""
