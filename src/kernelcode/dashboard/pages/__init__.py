"""Pages of the dashboard: runs listing, one job (with its panels), one kernel."""
