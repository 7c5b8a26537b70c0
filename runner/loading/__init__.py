"""From a name to weights in memory: the model store, opening a GGUF file, the devices, and where each layer and weight goes."""
