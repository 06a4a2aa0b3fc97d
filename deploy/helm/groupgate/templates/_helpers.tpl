{{- define "groupgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "groupgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 58 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 58 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "groupgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "groupgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "groupgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "groupgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The headless Service that lists every pod, ready or not: the StatefulSet's serviceName and the
     scrape target. */}}
{{- define "groupgate.podsService" -}}
{{- printf "%s-pods" (include "groupgate.fullname" .) -}}
{{- end -}}

{{- define "groupgate.instancesGroup" -}}
{{- if eq .Values.instancesGroup "-" -}}
{{- else if .Values.instancesGroup -}}
{{- .Values.instancesGroup -}}
{{- else -}}
{{- include "groupgate.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "groupgate.advertisedHost" -}}
{{- if .Values.listener.advertisedHost -}}
{{- .Values.listener.advertisedHost -}}
{{- else if eq .Values.workload "StatefulSet" -}}
{{- printf "$(POD_NAME).%s.$(POD_NAMESPACE).svc.%s" (include "groupgate.podsService" .) .Values.clusterDomain -}}
{{- else -}}
$(POD_IP)
{{- end -}}
{{- end -}}

{{/* Refuses combinations the gateway would refuse at start, with the value to change. */}}
{{- define "groupgate.validate" -}}
{{- if not .Values.upstream -}}
{{- fail "upstream: set the upstream cluster's bootstrap HOST:PORT[,HOST:PORT...]" -}}
{{- end -}}
{{- if not (has .Values.workload (list "Deployment" "StatefulSet")) -}}
{{- fail (printf "workload: Deployment or StatefulSet, not %q" .Values.workload) -}}
{{- end -}}
{{- if not (has .Values.stateStore (list "kafka" "file")) -}}
{{- fail (printf "stateStore: kafka or file, not %q" .Values.stateStore) -}}
{{- end -}}
{{- if eq .Values.stateStore "file" -}}
{{- if ne .Values.workload "StatefulSet" -}}
{{- fail "stateStore file keeps the state on a volume of its own: set workload: StatefulSet" -}}
{{- end -}}
{{- if ne (int .Values.replicaCount) 1 -}}
{{- fail "stateStore file: replicaCount must be 1 (separate state directories would make two coordinators of the same groups; use stateStore kafka for several instances)" -}}
{{- end -}}
{{- else if and (eq (include "groupgate.instancesGroup" .) "") (gt (int .Values.replicaCount) 1) -}}
{{- fail "instancesGroup \"-\" runs one instance that owns every shard: replicaCount must be 1" -}}
{{- end -}}
{{- $l := .Values.security.listener -}}
{{- if not (has $l.protocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL")) -}}
{{- fail (printf "security.listener.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not %q" $l.protocol) -}}
{{- end -}}
{{- if and (hasSuffix "SSL" $l.protocol) (not $l.tls.secretName) -}}
{{- fail (printf "security.listener.protocol %s needs security.listener.tls.secretName" $l.protocol) -}}
{{- end -}}
{{- if and $l.tls.secretName (not (hasSuffix "SSL" $l.protocol)) -}}
{{- fail "security.listener.tls.secretName is set: use protocol SSL or SASL_SSL" -}}
{{- end -}}
{{- if and (eq $l.sasl.mode "terminate") (not $l.sasl.credentialsSecret.name) -}}
{{- fail "security.listener.sasl.mode terminate needs security.listener.sasl.credentialsSecret.name" -}}
{{- end -}}
{{- $u := .Values.security.upstream -}}
{{- if not (has $u.protocol (list "PLAINTEXT" "SSL" "SASL_PLAINTEXT" "SASL_SSL")) -}}
{{- fail (printf "security.upstream.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL, not %q" $u.protocol) -}}
{{- end -}}
{{- if and (hasPrefix "SASL_" $u.protocol) (not $u.sasl.mechanism) -}}
{{- fail (printf "security.upstream.protocol %s needs security.upstream.sasl.mechanism" $u.protocol) -}}
{{- end -}}
{{- if and $u.sasl.mechanism (ne $u.sasl.mechanism "OAUTHBEARER") (not $u.sasl.passwordSecret.name) -}}
{{- fail "security.upstream.sasl.mechanism needs security.upstream.sasl.passwordSecret.name" -}}
{{- end -}}
{{- if and $u.tls.secretName (not (hasSuffix "SSL" $u.protocol)) -}}
{{- fail "security.upstream.tls.secretName is set: use protocol SSL or SASL_SSL" -}}
{{- end -}}
{{- end -}}

{{/* One TOML value: strings as basic strings (JSON's escapes are TOML's), whole numbers as integers
     (Helm reads YAML numbers as float64), lists as arrays, maps as inline tables. */}}
{{- define "groupgate.tomlValue" -}}
{{- $v := . -}}
{{- if kindIs "string" $v -}}
{{- toJson $v -}}
{{- else if kindIs "bool" $v -}}
{{- ternary "true" "false" $v -}}
{{- else if or (kindIs "int" $v) (kindIs "int64" $v) -}}
{{- printf "%d" $v -}}
{{- else if kindIs "float64" $v -}}
{{- if eq (float64 (int64 $v)) $v -}}{{ printf "%d" (int64 $v) }}{{- else -}}{{ printf "%v" $v }}{{- end -}}
{{- else if kindIs "slice" $v -}}
{{- $items := list -}}
{{- range $v -}}{{- $items = append $items (include "groupgate.tomlValue" .) -}}{{- end -}}
[{{ join ", " $items }}]
{{- else if kindIs "map" $v -}}
{{- $items := list -}}
{{- range $k, $x := $v -}}{{- $items = append $items (printf "%s = %s" (toJson $k) (include "groupgate.tomlValue" $x)) -}}{{- end -}}
{ {{- join ", " $items -}} }
{{- else -}}
{{- fail (printf "config: %v cannot be written as a TOML value" $v) -}}
{{- end -}}
{{- end -}}

{{/* key = value lines of a map, in key order; refuses keys the chart sets from other values. */}}
{{- define "groupgate.tomlTable" -}}
{{- $ctx := . -}}
{{- range $k, $v := $ctx.values }}
{{- if hasKey $ctx.managed $k }}
{{- fail (printf "config.%s.%s is set by the chart from %s" $ctx.name $k (get $ctx.managed $k)) }}
{{- end }}
{{ toJson $k }} = {{ include "groupgate.tomlValue" $v }}
{{- end }}
{{- end -}}

{{- define "groupgate.secretsDir" -}}/etc/groupgate/secrets{{- end -}}
