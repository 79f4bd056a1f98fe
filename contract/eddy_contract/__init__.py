"""The contract the operator and the runtime share (docs/DESIGN.md, "Components and folders"): the
`StreamApp` spec model (`spec`, validated by the CRD's schema in `crd` and its rules in `cel`, its
durations and sizes read by `units`), task ids (`tasks`), the assignor both run (`assignor`), the
messages of the channel between them (`channel`), the buckets of every duration histogram
(`histograms`) and the one way to a Kubernetes client (`kube`).
Neither half's package is imported here.
"""
