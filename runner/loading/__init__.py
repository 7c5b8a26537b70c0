"""From a name to weights in memory, in the order it happens: the model store resolves the
name (store.py), the GGUF file is opened (loader.py), the devices are found (devices.py) and
each layer and weight is given its device and memory (placement.py)."""
