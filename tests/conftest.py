pytest_plugins = ["trainjob_status_server.devcluster.pytest_plugin"]
