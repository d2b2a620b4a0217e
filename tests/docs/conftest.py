"""The docs' in-pod blocks run against our server on a development cluster, with a pod's
environment (the fixtures of the client's tests against the server)."""

from client_with_server.conftest import pod as pod
from client_with_server.conftest import server as server
