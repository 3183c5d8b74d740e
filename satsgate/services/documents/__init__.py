"""Document services: rendering, OCR, file conversion, e-signature and wallet passes."""
