"""Eddy's Kubernetes operator: reconcile StreamApps, assign tasks, drive failover and restores
(docs/DESIGN.md, "The operator's part")."""
