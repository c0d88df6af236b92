// The generated `Client` and `Components` come from ../../../../openapi.yaml at build time.
