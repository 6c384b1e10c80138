"""servelab: serve models over the Open Inference Protocol and measure which runtime meets your SLA."""
