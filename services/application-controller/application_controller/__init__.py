"""application-controller: KubeSphere's gitops.kubesphere.io Applications, expanded into Flux."""
