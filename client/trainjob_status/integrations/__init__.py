"""Framework callbacks that report through ``trainjob_status``; each imports its framework
only when it is itself imported (``trainjob_status.integrations.transformers``,
``trainjob_status.integrations.lightning``)."""
