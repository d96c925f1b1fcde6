{{/* Labels every object of the release carries. */}}
{{- define "sluice.labels" -}}
app.kubernetes.io/part-of: sluice
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The image reference: a digest pins it; else the tag, else appVersion. */}}
{{- define "sluice.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* Where controllers post events: the notification-controller's event hub, if deployed. */}}
{{- define "sluice.eventsArg" -}}
{{- if .Values.notificationController.create -}}
--events-addr=http://notification-controller.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}./
{{- end -}}
{{- end }}

{{/* Whether kustomize- and helm-controller are bound to cluster-admin. */}}
{{- define "sluice.privileged" -}}
{{- if or (not .Values.multitenancy.enabled) .Values.multitenancy.privileged -}}true{{- end -}}
{{- end }}

{{/*
The lockdown flags of the controllers that apply as tenants. The binaries are
locked down without flags too; with the lockdown off the chart opens them
explicitly (an empty --default-service-account applies as the controller).
*/}}
{{- define "sluice.lockdownArgs" -}}
{{- if .Values.multitenancy.enabled -}}
- --no-cross-namespace-refs=true
- --default-service-account={{ .Values.multitenancy.defaultServiceAccount }}
{{- else -}}
- --no-cross-namespace-refs=false
- --default-service-account=
{{- end -}}
{{- end }}

{{/* --no-cross-namespace-refs of the controllers that only read across namespaces. */}}
{{- define "sluice.crossNamespaceArg" -}}
--no-cross-namespace-refs={{ if .Values.multitenancy.enabled }}true{{ else }}false{{ end }}
{{- end }}

{{/*
One controller's Deployment. Called with a dict:
  root     the top-level context
  name     the controller (also its command, ServiceAccount and `app` label)
  c        its values section
  args     the controller's own flags, before the shared ones
  ports    extra container ports (the metrics and health ports are added)
  volumes  emptyDirs: list of {name, mountPath, sizeLimit}
  env      extra environment variables
Flags come in this order: its own, the shared ones, the values' extraArgs;
the controllers take the last value of a repeated flag, so extraArgs win.
*/}}
{{- define "sluice.deployment" -}}
{{- $root := .root -}}
{{- $c := .c -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app: {{ .name }}
    app.kubernetes.io/name: {{ .name }}
    {{- include "sluice.labels" $root | nindent 4 }}
spec:
  replicas: {{ $c.replicas }}
  selector:
    matchLabels:
      app: {{ .name }}
  template:
    metadata:
      labels:
        app: {{ .name }}
        app.kubernetes.io/name: {{ .name }}
        app.kubernetes.io/part-of: sluice
      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "8080"
        {{- with $c.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ .name }}
      terminationGracePeriodSeconds: 60
      {{- with $c.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: manager
          image: {{ include "sluice.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: [{{ .name | quote }}]
          args:
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            - --enable-leader-election
            - --watch-all-namespaces={{ $root.Values.watchAllNamespaces }}
            - --log-level={{ $c.logLevel | default $root.Values.logLevel }}
            - --log-encoding=json
            - --metrics-addr=:8080
            - --health-addr=:9440
            {{- with $c.concurrent }}
            - --concurrent={{ . }}
            {{- end }}
            {{- with $c.watchLabelSelector }}
            - {{ printf "--watch-label-selector=%s" . | quote }}
            {{- end }}
            {{- range $c.extraArgs }}
            - {{ . | quote }}
            {{- end }}
          env:
            - name: RUNTIME_NAMESPACE
              valueFrom:
                fieldRef:
                  fieldPath: metadata.namespace
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $c.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            {{- with .ports }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            - name: http-prom
              containerPort: 8080
              protocol: TCP
            - name: healthz
              containerPort: 9440
              protocol: TCP
          readinessProbe:
            httpGet:
              path: /readyz
              port: healthz
          livenessProbe:
            httpGet:
              path: /healthz
              port: healthz
          resources:
            {{- toYaml $c.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            {{- range .volumes }}
            - name: {{ .name }}
              mountPath: {{ .mountPath }}
            {{- end }}
      volumes:
        {{- range .volumes }}
        - name: {{ .name }}
          emptyDir:
            sizeLimit: {{ required (printf "a sizeLimit for the %s volume" .name) .sizeLimit }}
        {{- end }}
      {{- with $c.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $c.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}
