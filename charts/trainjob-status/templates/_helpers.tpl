{{/*
The namespace the server runs in: namespace.name, or the release's.
*/}}
{{- define "trainjob-status.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/*
Labels on every object's metadata: the kustomize overlays' (name, component), the
values' commonLabels, and Helm's own. Called with (list $ "server") or (list $ "monitoring").
*/}}
{{- define "trainjob-status.labels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: trainjob-status
app.kubernetes.io/component: {{ index . 1 }}
{{- with $root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/version: {{ $root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version }}
{{- end -}}

{{/*
The server's ServiceAccount as a binding subject.
*/}}
{{- define "trainjob-status.subject" -}}
- kind: ServiceAccount
  name: trainjob-status
  namespace: {{ include "trainjob-status.namespace" . }}
{{- end -}}

{{/*
True (non-empty) when cert-manager provides the certificates.
*/}}
{{- define "trainjob-status.certManager" -}}
{{- if eq .Values.certificates.source "cert-manager" }}true{{ end -}}
{{- end -}}

{{/*
How the metrics port is scraped, as annotations on the Service and the ServiceMonitor
(the kustomize overlays' scrape-settings copies them from one to the other): the scheme,
and whose token Prometheus sends over HTTPS (file: its own; secret: the scraper's).
*/}}
{{- define "trainjob-status.scrapeSettings" -}}
trainjob-status.kubeflow.org/metrics-scheme: {{ include "trainjob-status.metricsScheme" . }}
trainjob-status.kubeflow.org/metrics-token: {{ .Values.metrics.scrapeToken }}
{{- end -}}

{{/*
The metrics port's scheme: https under metrics.secure.
*/}}
{{- define "trainjob-status.metricsScheme" -}}
{{- ternary "https" "http" .Values.metrics.secure -}}
{{- end -}}
