"""VeloBins network: encoder, bin decoder, labels, losses, training, streaming inference, export, node."""
