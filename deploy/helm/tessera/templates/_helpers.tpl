{{/* The chart's name ("tessera", or nameOverride): the app.kubernetes.io/name of its objects is
     <name>-scheduler, <name>-agent. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/* The release's prefix of every object name: fullnameOverride, else the release name when it
     contains the chart's name ("tessera", "tessera-canary"), else <release>-<name>. The default
     release "tessera" keeps the names tessera-scheduler, tessera-agent, ... Cut to 40 characters,
     so that every name made from it (at most 23 more) stays within 63. */}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The scheduler's and the agent's object names (Deployment, DaemonSet, ConfigMap prefix,
     Lease, Service, ClusterRoles, ...), and their ServiceAccounts' (serviceAccount.name, else the
     same). */}}
{{- define "tessera.scheduler" -}}{{ include "tessera.fullname" . }}-scheduler{{- end }}
{{- define "tessera.agent" -}}{{ include "tessera.fullname" . }}-agent{{- end }}
{{- define "tessera.schedulerSA" -}}
{{- default (include "tessera.scheduler" .) .Values.scheduler.serviceAccount.name }}
{{- end }}
{{- define "tessera.agentSA" -}}
{{- default (include "tessera.agent" .) .Values.agent.serviceAccount.name }}
{{- end }}

{{/* The label that selects a component's pods (Deployment, DaemonSet, Service, PDB, monitors;
     also Prometheus's job): app.kubernetes.io/name is the component's object name,
     <fullname>-scheduler or <fullname>-agent, so each release selects only its own pods. A
     selector cannot change in place: for the default release these are the selectors of the
     charts before names followed the release (app.kubernetes.io/name: tessera-scheduler,
     tessera-agent, nothing more), so `helm upgrade` from them works (helm_e2e_test,
     SelectorsKeepUpgradesFromEarlierCharts). component: "scheduler", "agent". */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.fullname" .root }}-{{ .component }}
{{- end }}

{{/* Labels every object carries; component: "scheduler", "agent", or "" (shared objects). */}}
{{- define "tessera.labels" -}}
{{- if .component -}}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/component: {{ .component }}
{{- else -}}
app.kubernetes.io/name: {{ include "tessera.name" .root }}
{{- end }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/part-of: tessera
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{- define "tessera.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The user name a ServiceAccount's requests carry. */}}
{{- define "tessera.saUser" -}}
system:serviceaccount:{{ .root.Release.Namespace }}:{{ .name }}
{{- end }}

{{/* KUBERNETES_SERVICE_HOST/PORT from apiServer.host/port, when set (else nothing: the kubelet's
     values for the kubernetes Service apply). */}}
{{- define "tessera.apiServerEnv" -}}
{{- with .Values.apiServer.host -}}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $.Values.apiServer.port | default 443 | quote }}
{{- end }}
{{- end }}
