{{/*
Expand the name of the chart.
*/}}
{{- define "kalypso-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A fully qualified app name, as the original chart makes it (so that an upgrade keeps the
names of the Deployment, ServiceAccount and RBAC objects).
*/}}
{{- define "kalypso-scheduler.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kalypso-scheduler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kalypso-scheduler.labels" -}}
helm.sh/chart: {{ include "kalypso-scheduler.chart" . }}
{{ include "kalypso-scheduler.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kalypso-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kalypso-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kalypso-scheduler.serviceAccountName" -}}
{{- include "kalypso-scheduler.fullname" . }}-controller-manager
{{- end }}

{{/* The control plane's URL, branch and the token: the flat values win over the nested. */}}
{{- define "kalypso-scheduler.controlPlaneURL" -}}
{{- .Values.controlPlaneURL | default (.Values.controlPlane | default dict).URL | default "" }}
{{- end }}
{{- define "kalypso-scheduler.controlPlaneBranch" -}}
{{- .Values.controlPlaneBranch | default (.Values.controlPlane | default dict).branch | default "main" }}
{{- end }}
{{- define "kalypso-scheduler.token" -}}
{{- .Values.ghRepoToken | default (.Values.ghRepo | default dict).token | default "" }}
{{- end }}
