"""Front-ends: translate a wire protocol to and from :mod:`servelab.types` and call the DataPlane."""
