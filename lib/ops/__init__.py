"""Maintenance of the stores below the service: the admin's operations, the dashboard and the model-version upgrade."""
