"""The speculative decoding algorithm: pure numpy over the Backend protocol.

Nothing here imports llama_cpp or Qt; the unit tests run it on a scripted fake.
"""
