{{/* Names and labels shared by the chart's templates. */}}

{{- define "eddy-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "eddy-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "eddy-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "eddy-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "eddy-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "eddy-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: eddy
{{- end -}}

{{- define "eddy-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "eddy-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "eddy-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/*
Rules for the StreamApps' namespaces. The operator holds every permission it grants to a
StreamApp's driver Role (Kubernetes forbids granting what one does not hold).
*/}}
{{- define "eddy-operator.namespacedRules" -}}
- apiGroups: [eddy.dev]
  resources: [streamapps]
  verbs: [get, list, watch, patch, update]
- apiGroups: [eddy.dev]
  resources: [streamapps/status]
  verbs: [get, patch, update]
- apiGroups: [eddy.dev]
  resources: [streamapps/scale]
  verbs: [get, patch, update]
- apiGroups: [eddy.dev]
  resources: [streamapps/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods, services, configmaps]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
- apiGroups: [""]
  resources: [secrets]
  # get: the push token, for a failover carried out while no driver runs (eddy_operator.driverless)
  verbs: [get, create]
- apiGroups: [""]
  resources: [serviceaccounts]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [apps]
  resources: [statefulsets]
  verbs: [get, list, watch, create, update, patch, delete, deletecollection]
- apiGroups: [apps]
  resources: [statefulsets/scale]
  verbs: [get, update, patch]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end -}}
