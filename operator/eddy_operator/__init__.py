"""Eddy's Kubernetes operator: reconcile StreamApps, assign tasks, drive failover and restores."""
