{{/* Labels every object carries; component: tessera-scheduler, tessera-agent, or "". */}}
{{- define "tessera.labels" -}}
{{- if .component -}}
app.kubernetes.io/name: {{ .component }}
{{ end -}}
app.kubernetes.io/part-of: tessera
{{- if ne .root.Release.Name "tessera" }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end }}
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
