"""Reading a metadata value back with the gguf package's own reader (the model tests' oracle)."""

import gguf


def field(reader, key: str):
    """A metadata value: scalar, string, or list (read from the raw parts, as every gguf version has them)."""
    f = reader.fields[key]
    kind = f.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if kind == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]].tolist()[0]
