"""The server core: registry, scheduling and the data plane every front-end calls."""
