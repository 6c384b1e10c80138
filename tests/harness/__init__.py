"""The one test harness every test builds on (imported as ``harness``; the rootdir conftest.py puts tests/ on
``sys.path``):

- :mod:`harness.models`: every tiny model (ONNX graphs, the torch MLP, Python-backend sources)
- :mod:`harness.repository`: config.pbtxt, model folders and the one test repository
- :mod:`harness.data`: sample tensors for every datatype, feature rows, weights
- :mod:`harness.backends`: backends built by hand as the registry would, the MLP on every runtime
- :mod:`harness.gates`: hold a request inside a model until the test lets it go (socket or thread)
- :mod:`harness.servers`: a real ``servelab serve`` subprocess on port 0, ready by its own signal
- :mod:`harness.inprocess`: the gRPC front-end in a background thread, for tests of the server object
- :mod:`harness.clients`: tritonclient inputs for every transport
- :mod:`harness.peers`: the real Triton and perf_analyzer (unpacked under .peers/ on first use)

Nothing is downloaded; every server listens on 127.0.0.1 only.
"""
