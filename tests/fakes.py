"""Stand-ins for PyCUDA's GPU arrays and prepared kernels, for the CPU tests
of launch wrappers: what a wrapper reads from an array (shape, dtype,
strides, flags, address) and what it passes to a launch."""

import numpy as np


class FakeArray:
    """A C-contiguous device array at `address`; indexing the first axis
    gives a view, as GPUArray does."""

    def __init__(self, shape, dtype=np.uint16, address=0x10000):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.size, self.ndim = int(np.prod(self.shape)), len(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        strides, step = [], self.dtype.itemsize
        for n in reversed(self.shape):
            strides.append(step)
            step *= n
        self.strides = tuple(reversed(strides))
        self.gpudata = address
        self.flags = type("Flags", (), {"c_contiguous": True})()

    def __getitem__(self, i):
        """An index gives the sub-array at it; a slice, the rows it covers
        (views, as GPUArray's)."""
        if isinstance(i, slice):
            start, stop, _ = i.indices(self.shape[0])
            return FakeArray((stop - start,) + self.shape[1:], self.dtype,
                             self.gpudata + start * self.strides[0])
        return FakeArray(self.shape[1:], self.dtype, self.gpudata + i * self.strides[0])

    def reshape(self, *shape) -> "FakeArray":
        """A view of the same bytes in another shape."""
        assert int(np.prod(shape)) == self.size, (shape, self.shape)
        return FakeArray(shape, self.dtype, self.gpudata)


def laid_out(shapes, dtype=np.uint16, start=0x10000) -> list:
    """Fake arrays of `shapes`, one after another, each on a 256-byte
    boundary past the one before, as cudaMalloc places them."""
    out, addr = [], start
    for shape in shapes:
        a = FakeArray(shape, dtype, addr)
        out.append(a)
        addr = (addr + a.nbytes + 511) // 256 * 256
    return out


def recorder(keys) -> tuple[dict, list]:
    """Fake prepared kernels, one for each of `keys`, and the one list their
    launches go to."""
    calls = []
    return {k: FakeKernel(k, calls) for k in keys}, calls


class FakeKernel:
    """A prepared kernel that keeps each launch in `calls` as
    (key, grid, block, args, keyword args)."""

    def __init__(self, key, calls: list):
        self.key, self.calls = key, calls

    def prepared_call(self, grid, block, *args, **kw):
        self.calls.append((self.key, grid, block, args, kw))


def fake_tensor_maps(monkeypatch, module, base: int) -> list:
    """Replace module.tensor_map (chapter 12's wgmma_gemm.tensor_map, which
    calls the driver) with a stand-in: call n returns a fake 128-byte array
    at base + 0x100 n. Returns the list of the calls' arguments."""
    made = []

    def fake_map(address, rows, cols, box_rows, box_cols):
        made.append((address, rows, cols, box_rows, box_cols))
        return FakeArray((128,), np.uint8, base + 0x100 * len(made))

    monkeypatch.setattr(module, "tensor_map", fake_map)
    return made
