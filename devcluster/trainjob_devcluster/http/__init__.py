"""The HTTP side of the development cluster: its HTTP/1.1 server, routing, the REST
handlers with their body codecs, list and watch, discovery, OpenAPI and table printing."""
