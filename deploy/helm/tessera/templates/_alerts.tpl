{{/* The alert groups of prometheusrule.yaml, also checked alone by `promtool check rules` and
     `promtool test rules` (test/helm/helm_e2e_test.cc, test/helm/alerts_test.yaml). */}}
{{- define "tessera.alertGroups" -}}
{{- $r := .Values.metrics.prometheusRule }}
{{- $s := printf "job=%q" (include "tessera.scheduler" .) }}
{{- $a := printf "job=%q" (include "tessera.agent" .) }}
{{- $for := printf "%dm" (int $r.forMinutes) }}
groups:
  - name: tessera
    rules:
      - alert: TesseraAgentDown
        expr: up{ {{- $a -}} } == 0
        for: {{ $for }}
        labels: {severity: critical}
        annotations:
          summary: The tessera agent on {{ "{{ $labels.pod }}" }} cannot be scraped.
          description: >-
            New containers of GPU pods on its node start without GPUs until it is back (kubectl
            -n {{ .Release.Namespace }} describe pod {{ "{{ $labels.pod }}" }}; docs/troubleshooting.md,
            "The agent restarts").
      - alert: TesseraGpuUnhealthy
        expr: tessera_agent_gpu_healthy{ {{- $a -}} } == 0
        for: 1m
        labels: {severity: warning}
        annotations:
          summary: GPU {{ "{{ $labels.gpu }}" }} ({{ "{{ $labels.uuid }}" }}) of node {{ "{{ $labels.node }}" }} is unhealthy.
          description: >-
            The agent saw a critical XID; the scheduler places nothing new on it. Its pods keep
            running (kubectl get events --field-selector reason=GPUUnhealthy -A).
      - alert: TesseraPodsPendingTooLong
        expr: >-
          max(tessera_scheduler_oldest_pending_pod_age_seconds{ {{- $s -}} }
          and on (instance) (tessera_scheduler_is_leader{ {{- $s -}} } == 1))
          > {{ mul (int $r.pendingMinutes) 60 }}
        labels: {severity: warning}
        annotations:
          summary: A pod has waited more than {{ $r.pendingMinutes }} minutes for the tessera scheduler.
          description: >-
            kubectl tessera status shows who waits; kubectl describe pod shows why
            (docs/troubleshooting.md, "A pod stays Pending").
      - alert: TesseraNodeInventoryInvalid
        expr: max by (node) (tessera_scheduler_node_inventory_valid{ {{- $s -}} }) == 0
        for: {{ $for }}
        labels: {severity: warning}
        annotations:
          summary: Node {{ "{{ $labels.node }}" }}'s tessera.dev/gpu-inventory cannot be used; its GPUs take no pods.
          description: >-
            kubectl get node {{ "{{ $labels.node }}" }} -o
            jsonpath='{.metadata.annotations.tessera\.dev/gpu-inventory}', and the agent's log
            on that node.
      - alert: TesseraGpusBlocked
        expr: max(tessera_scheduler_nodes_gpu_blocked{ {{- $s -}} }) > 0
        for: {{ $for }}
        labels: {severity: warning}
        annotations:
          summary: "{{ "{{ $value }}" }} node(s) take no new GPU pods: a bound pod's tessera.dev/assignment there cannot be read."
          description: >-
            The scheduler's Events of reason GpuAssignmentUnreadable name the pods (kubectl get
            events -A --field-selector reason=GpuAssignmentUnreadable).
      - alert: TesseraGpuCapRefusals
        expr: sum by (namespace, pod) (increase(tessera_agent_pod_gpu_cap_refusals_total{ {{- $a -}} }[10m])) > 0
        labels: {severity: info}
        annotations:
          summary: Pod {{ "{{ $labels.namespace }}/{{ $labels.pod }}" }} asked for more GPU memory than its share.
          description: >-
            The CUDA shim refused {{ "{{ $value }}" }} allocations in 10 minutes: the pod's
            tessera.dev/gpu-memory is too small for what it does.
{{- end }}
