"""The HTTP side of the development cluster: its HTTP/1.1 server, routing, the REST
handlers with their JSON and YAML body codecs, list and watch, and legacy discovery."""
