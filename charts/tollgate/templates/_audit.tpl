{{- /* tollgate.auditPodSpec is the audit's pod spec, the same for the CronJob (audit.mode=cronjob,
one-shot runs) and the Deployment (audit.mode=watch, `tollgate audit --watch`). */ -}}
{{- define "tollgate.auditPodSpec" -}}
{{- $a := .Values.audit -}}
{{- $watch := eq $a.mode "watch" -}}
serviceAccountName: {{ include "tollgate.fullname" . }}-audit
{{- if not $watch }}
restartPolicy: Never
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: audit
    image: {{ include "tollgate.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      - audit
      - --tollgate-namespace=$(POD_NAMESPACE)
      - --report-kind={{ $a.reportKind }}
      - --page-size={{ $a.pageSize }}
      - --parallel-namespaces={{ $a.parallelNamespaces }}
      - --parallel-resources={{ $a.parallelResources }}
      - --parallel-policies={{ $a.parallelPolicies }}
      {{- with $a.ignoreNamespaces }}
      - --ignore-namespaces={{ join "," . }}
      {{- end }}
      {{- if $watch }}
      - --watch
      - --metrics-addr=:{{ $a.metricsPort }}
      {{- end }}
      - --log-fmt=json
      {{- range $a.extraArgs }}
      - {{ . | quote }}
      {{- end }}
    env:
      - name: POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      {{- with include "tollgate.telemetryEnv" . }}
      {{- . | nindent 6 }}
      {{- end }}
    {{- if $watch }}
    ports:
      - name: metrics
        containerPort: {{ $a.metricsPort }}
        protocol: TCP
    {{- end }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    resources:
      {{- toYaml $a.resources | nindent 6 }}
{{- end -}}
