"""The other replicas: who they are (the Service's EndpointSlices) and what a stopping
replica hands them (the updates its drain could not write)."""
