"""maskwise: encoder, decoder and encoder-decoder transformers from one block.

``maskwise.load(path)`` opens a maskwise run folder or a local Hugging Face model folder. It is
resolved on first use, so ``import maskwise`` stays cheap (no torch until a model is asked for).
"""


def __getattr__(name: str):
    if name == "load":
        # deferred: `import maskwise` stays cheap (no torch until a model is asked for, as the docstring says)
        from maskwise.interop.folders import load

        return load
    raise AttributeError(f"module 'maskwise' has no attribute {name!r}")
