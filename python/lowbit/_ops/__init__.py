"""The implementations of lowbit's ops for a known array backend (lowbit._backend): the
`*_with` functions, which allocate the outputs with the caller's library and call the
extension module. The public modules (lowbit.quant, lowbit.gemm, ...) and the torch
custom ops (lowbit.torch_ops) both call them; nothing here imports torch or those
modules."""
