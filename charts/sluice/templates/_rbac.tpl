{{- /*
What each controller's ClusterRole allows: only the verbs on the kinds it
reconciles, reads and writes, as its code uses them (informers list and
watch; steps get; status, finalizers and annotations are patches). Every
controller also creates and patches Events, and takes its Lease in the release
namespace through the `sluice-leader-election` Role. No controller lists or
watches Secrets: the ones that read credentials `get` the Secret an object
names, and the gating-controller reads none.
*/ -}}

{{- /* A controller's own kinds: read, patched (finalizers, annotations), their status written. */ -}}
{{- define "sluice.rbac.owns" -}}
- apiGroups: [{{ .group }}]
  resources: [{{ join ", " .kinds }}]
  verbs: [get, list, watch, patch]
- apiGroups: [{{ .group }}]
  resources:
    {{- range .kinds }}
    - {{ . }}/status
    {{- end }}
  verbs: [get, patch]
{{- /* Owner references with blockOwnerDeletion need update on the owner's finalizers. */}}
- apiGroups: [{{ .group }}]
  resources:
    {{- range .kinds }}
    - {{ . }}/finalizers
    {{- end }}
  verbs: [update]
{{- end }}

{{- define "sluice.rbac.reads" -}}
- apiGroups: [{{ .group }}]
  resources: [{{ join ", " .kinds }}]
  verbs: [get, list, watch]
{{- end }}

{{- define "sluice.rbac.events" -}}
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{- define "sluice.rbac.source-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "source.toolkit.fluxcd.io" "kinds" (list "gitrepositories" "ocirepositories" "helmrepositories" "helmcharts" "buckets")) }}
{{ include "sluice.rbac.owns" (dict "group" "source.extensions.fluxcd.io" "kinds" (list "artifactgenerators")) }}
# ArtifactGenerators write the ExternalArtifacts they publish, and delete them.
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [externalartifacts]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [externalartifacts/status]
  verbs: [get, patch]
{{ include "sluice.rbac.reads" (dict "group" "gating.toolkit.fluxcd.io" "kinds" (list "gates")) }}
# Git, registry, bucket and TLS credentials a source names.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{ include "sluice.rbac.events" . }}
{{- end }}

{{- define "sluice.rbac.kustomize-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "kustomize.toolkit.fluxcd.io" "kinds" (list "kustomizations")) }}
{{ include "sluice.rbac.reads" (dict "group" "source.toolkit.fluxcd.io" "kinds" (list "gitrepositories" "ocirepositories" "buckets" "externalartifacts")) }}
{{ include "sluice.rbac.reads" (dict "group" "gating.toolkit.fluxcd.io" "kinds" (list "gates")) }}
# Decryption keys, kubeconfigs and postBuild.substituteFrom.
- apiGroups: [""]
  resources: [secrets, configmaps]
  verbs: [get]
# Every apply, prune and health read runs as a tenant's ServiceAccount.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [impersonate]
{{ include "sluice.rbac.events" . }}
{{- end }}

{{- define "sluice.rbac.helm-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "helm.toolkit.fluxcd.io" "kinds" (list "helmreleases")) }}
# The HelmChart of each HelmRelease's spec.chart, made and deleted with it (as Flux's).
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [helmcharts]
  verbs: [get, list, watch, create, patch, delete]
{{ include "sluice.rbac.reads" (dict "group" "source.toolkit.fluxcd.io" "kinds" (list "ocirepositories" "externalartifacts")) }}
{{ include "sluice.rbac.reads" (dict "group" "gating.toolkit.fluxcd.io" "kinds" (list "gates")) }}
# valuesFrom and kubeconfigs.
- apiGroups: [""]
  resources: [secrets, configmaps]
  verbs: [get]
# helm, the release history and CRDs run as the tenant's ServiceAccount.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [impersonate]
{{ include "sluice.rbac.events" . }}
{{- end }}

{{- define "sluice.rbac.application-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "gitops.kubesphere.io" "kinds" (list "applications")) }}
# The children it expands Applications into (and the HelmChart templates it saves).
- apiGroups: [helm.toolkit.fluxcd.io]
  resources: [helmreleases]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [kustomize.toolkit.fluxcd.io]
  resources: [kustomizations]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [helmcharts]
  verbs: [get, list, watch, create, patch, delete]
# Whether a destination's kubeconfig Secret exists (its content is never read here).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{ include "sluice.rbac.events" . }}
{{- end }}

{{- define "sluice.rbac.resourceset-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "fluxcd.controlplane.io" "kinds" (list "resourcesets" "resourcesetinputproviders")) }}
# Input providers' credentials (Git hosts, registries).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# Applies, dependsOn reads and copy-from run as the tenant's ServiceAccount.
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [impersonate]
{{ include "sluice.rbac.events" . }}
{{- end }}

{{- define "sluice.rbac.gating-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "gating.toolkit.fluxcd.io" "kinds" (list "gates")) }}
{{ include "sluice.rbac.events" . }}
{{- end }}

{{- define "sluice.rbac.notification-controller" -}}
{{ include "sluice.rbac.owns" (dict "group" "notification.toolkit.fluxcd.io" "kinds" (list "receivers" "alerts" "providers")) }}
# Receivers annotate the objects they name (reconcile.fluxcd.io/requestedAt,
# a Gate's open/close request) and Alerts read the labels of an event's object:
# every kind a Receiver or an Alert may name, Flux's and the Flux Operator's.
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [gitrepositories, ocirepositories, helmrepositories, helmcharts, buckets, externalartifacts]
  verbs: [get, list, patch]
- apiGroups: [source.extensions.fluxcd.io]
  resources: [artifactgenerators]
  verbs: [get, list, patch]
- apiGroups: [kustomize.toolkit.fluxcd.io]
  resources: [kustomizations]
  verbs: [get, list, patch]
- apiGroups: [helm.toolkit.fluxcd.io]
  resources: [helmreleases]
  verbs: [get, list, patch]
- apiGroups: [gating.toolkit.fluxcd.io]
  resources: [gates]
  verbs: [get, list, patch]
- apiGroups: [image.toolkit.fluxcd.io]
  resources: [imagerepositories, imagepolicies, imageupdateautomations]
  verbs: [get, list, patch]
- apiGroups: [fluxcd.controlplane.io]
  resources: [fluxinstances, resourcesets, resourcesetinputproviders]
  verbs: [get, list, patch]
# Provider tokens and certificates, Receiver secrets.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# The event hub authenticates the controllers that post to it (--events-service-accounts).
- apiGroups: [authentication.k8s.io]
  resources: [tokenreviews]
  verbs: [create]
{{ include "sluice.rbac.events" . }}
{{- end }}
