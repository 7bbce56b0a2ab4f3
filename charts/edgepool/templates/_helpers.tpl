{{- define "edgepool.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "edgepool.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "edgepool.labels" -}}
{{ include "edgepool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The operator pods' selector labels as key=value,... for --operator-pod-labels. */}}
{{- define "edgepool.selectorLabelsFlag" -}}
{{- $labels := include "edgepool.selectorLabels" . | fromYaml -}}
{{- range $i, $k := keys $labels | sortAlpha -}}
{{- if $i }},{{ end }}{{ $k }}={{ index $labels $k }}
{{- end -}}
{{- end -}}

{{/* One agentScrapers item as namespace:KEY=VALUE,...,pod:KEY=VALUE,... for --agent-scraper. */}}
{{- define "edgepool.scraperFlag" -}}
{{- $terms := list -}}
{{- range $k, $v := .namespaceLabels }}{{ $terms = append $terms (printf "namespace:%s=%s" $k $v) }}{{ end -}}
{{- range $k, $v := .podLabels }}{{ $terms = append $terms (printf "pod:%s=%s" $k $v) }}{{ end -}}
{{- join "," $terms -}}
{{- end -}}

{{/* A set of grants as the keys of the grants ConfigMap (config/policy/grants.yaml): lists
joined with commas, after a prefix ("" for every namespace, "<namespace>." for one). */}}
{{- define "edgepool.grants" -}}
{{- $prefix := .prefix -}}
{{- range $k, $v := .grants }}
{{ printf "%s%s" $prefix $k }}: {{ if kindIs "slice" $v }}{{ join "," $v | quote }}{{ else }}{{ $v | toString | quote }}{{ end }}
{{- end -}}
{{- end -}}

{{/* The cache pods' image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "edgepool.cacheImage" -}}
{{- with .Values.cacheImage -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ .tag | default $.Chart.AppVersion }}
{{- end -}}
{{- end -}}
{{- end -}}
