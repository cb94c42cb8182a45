"""The job runner: Celery plumbing, the consumer, and the lifecycle of one job on this driver."""
