"""servelab's own protobuf descriptor pool, where the generated TF Serving modules register.

TensorFlow registers ``tensorflow/core/framework/tensor.proto`` (and the rest) in protobuf's default
pool; servelab's restatements of the same files (``specs/tfserving``) live here instead, so one
process can import both. The well-known types that the TF Serving files import are added first.
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pool, wrappers_pb2

__all__ = ["POOL"]

POOL = descriptor_pool.DescriptorPool()
for _module in (any_pb2, wrappers_pb2):
    POOL.AddSerializedFile(_module.DESCRIPTOR.serialized_pb)
