"""From a name to weights in memory, in the order it happens: the model store resolves the
name (store.py), the GGUF file is opened (loader.py), the devices are found (devices.py),
the layers that fit on them are chosen by measuring what a placement costs (fit.py), and
each weight is given its device and memory (placement.py) before the loader fills it."""
