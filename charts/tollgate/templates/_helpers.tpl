{{/* tollgate.fullname prefixes every object's name. */}}
{{- define "tollgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "tollgate" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tollgate" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* tollgate.controller names the controller's Deployment, roles, bindings and Service. */}}
{{- define "tollgate.controller" -}}
{{- printf "%s-controller" (include "tollgate.fullname" .) -}}
{{- end -}}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tollgate.controller" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* tollgate.labels are on every object the chart makes. */}}
{{- define "tollgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: tollgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tollgate
{{- end -}}

{{/* tollgate.selectorLabels select the controller's pods. */}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: tollgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "tollgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "tollgate.policyServerImage" -}}
{{- $ps := .Values.policyServer.image -}}
{{- printf "%s:%s" (default .Values.image.repository $ps.repository) (default (default .Chart.AppVersion .Values.image.tag) $ps.tag) -}}
{{- end -}}

{{- /* tollgate.telemetryEnv is the OTEL_* environment of Kubewarden's telemetry values
(telemetry.tracing, telemetry.metrics, telemetry.custom.endpoint and .insecure), for the
controller, the audit and the PolicyServer: OTLP over gRPC to the collector; nothing when both
are off. */ -}}
{{- define "tollgate.telemetryEnv" -}}
{{- $t := .Values.telemetry -}}
{{- if or $t.tracing $t.metrics -}}
{{- $ep := required "telemetry.custom.endpoint: the OTLP/gRPC endpoint of a collector is required with telemetry.tracing or telemetry.metrics" $t.custom.endpoint -}}
{{- if not (regexMatch "^https?://" $ep) -}}
{{- $ep = printf "%s://%s" (ternary "http" "https" $t.custom.insecure) $ep -}}
{{- end }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $ep | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: grpc
- name: OTEL_TRACES_EXPORTER
  value: {{ ternary "otlp" "none" $t.tracing | quote }}
- name: OTEL_METRICS_EXPORTER
  value: {{ ternary "otlp" "prometheus" $t.metrics | quote }}
{{- end -}}
{{- end -}}
