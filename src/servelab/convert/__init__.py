"""Model conversion: export PyTorch modules to ONNX, TorchScript, torch.export programs and OpenVINO IR."""
