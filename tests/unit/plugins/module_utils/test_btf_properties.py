"""Properties of the BTF layouts (hypothesis): any YAML value against any layout is a clear error or bytes that
decode to a value that encodes back to the same bytes; any bytes decode to a value that encodes and decodes
back to itself. Layouts are built in Python (integers, enums, bitfields, byte and char arrays, arrays, structs
and unions nested), no kernel; the examples are bounded (EXAMPLES each)."""

import string

from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.ebpf.xdp.plugins.module_utils.host import netns as _netns
from ansible_collections.ebpf.xdp.plugins.module_utils.maps import btf as _btf

EXAMPLES = 300
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENUMERATORS = ["XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"]
# No member called hex: a struct that has one cannot be written as {hex: ...}, so the bits of its padding are not
# kept (test_btf.py shows that corner).
FIELD_NAMES = ["packets", "bytes", "ifindex", "out_ifindex", "label", "mode", "a", "b", "c", "d"]


class Resolver:
    place = "this network namespace"

    @staticmethod
    def ifindex(name):
        if name != "eth0":
            raise _netns.NotFoundError("interface %r does not exist in %s" % (name, Resolver.place))
        return 2

    @staticmethod
    def has_device(_index):
        return True

    @staticmethod
    def program_id(ref):
        return ref


ENC = _btf.Encoder(Resolver())


@st.composite
def ints(draw):
    size = draw(st.sampled_from([1, 2, 4, 8, 16]))
    signed = draw(st.booleans())
    return _btf.Int(size, signed, boolean=size == 1 and not signed and draw(st.booleans()))


@st.composite
def enums(draw):
    size = draw(st.sampled_from([1, 2, 4, 8]))
    signed = draw(st.booleans())
    low, high = _btf.Int(size, signed).bounds()
    names = draw(st.lists(st.sampled_from(ENUMERATORS), unique=True, max_size=5))
    values = draw(st.lists(st.integers(low, high), min_size=len(names), max_size=len(names)))
    return _btf.Enum(size, signed, "enum e", list(zip(names, values)))


LEAVES = st.one_of(
    ints(), enums(),
    st.builds(_btf.Sized, st.integers(1, 20), st.just("value")),
    st.builds(_btf.Bytes, st.integers(0, 20), st.just("__u8[]")),
    st.builds(_btf.Text, st.integers(0, 20), st.just("char[]")),
)


@st.composite
def records(draw, children):
    union = draw(st.booleans())
    members = draw(st.lists(children, max_size=4))
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), min_size=len(members), max_size=len(members), unique=True))
    fields, offset = [], 0
    for name, layout in zip(names, members):
        fields.append(_btf.Field(name, layout, 0 if union else offset, 0 if union else offset * 8))
        offset = max(offset, layout.size) if union else offset + layout.size
    if draw(st.booleans()):
        # Bitfields in one storage unit after the members (at 0 in a union), as clang packs them.
        storage = draw(st.sampled_from([1, 2, 4, 8]))
        base = 0 if union else offset
        bit = base * 8
        taken = {field.name for field in fields}
        for i, width in enumerate(draw(st.lists(st.integers(1, 8 * storage), max_size=3))):
            if bit + width > (base + storage) * 8:
                break
            layout = draw(st.one_of(st.builds(_btf.Int, st.just(storage), st.booleans()), enums()))
            if layout.size != storage:
                layout = _btf.Int(storage, False)
            fields.append(_btf.Field("bits%d" % i if "bits%d" % i not in taken else "x%d" % i, layout, base, bit,
                                     width))
            bit += width
        offset = max(offset, storage) if union else base + storage
    size = offset + draw(st.integers(0, 3))  # trailing padding
    return _btf.Struct(size, "union u" if union else "struct s", fields)


LAYOUTS = st.recursive(
    LEAVES,
    lambda children: st.one_of(st.builds(_btf.Array, children, st.integers(0, 4)), records(children)),
    max_leaves=12)

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-300, 300), st.floats(allow_nan=True),
    st.text(max_size=24), st.text(alphabet=string.printable, max_size=24),
    st.sampled_from(ENUMERATORS + ["eth0", "eth9", "10.0.0.1", "ff02::1", "02:00:00:00:00:01", "0x10", " 7 ", "-1",
                                   "", "0a0b", "XDP_DROP "]),
)
YAML_VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=5), st.integers(-2, 2)), children,
                        max_size=4),
        st.builds(lambda v: {"hex": v}, st.one_of(st.text(alphabet="0123456789abcdefABCDEF :-x", max_size=40),
                                                  st.integers())),
        st.builds(lambda v: {"ifindex": v}, st.one_of(st.just("eth0"), st.text(max_size=5), st.integers(0, 9))),
    ),
    max_leaves=20)


@st.composite
def shaped(draw, layout):
    """A value made for the layout (mostly right, sometimes not): more of the examples get past the first
    check than arbitrary values do."""
    if draw(st.integers(0, 9)) == 0:
        return draw(YAML_VALUES)
    if isinstance(layout, _btf.Struct):
        names = draw(st.lists(st.sampled_from([f.name for f in layout.fields]), unique=True)) \
            if layout.fields else []
        return {name: draw(shaped(layout.by_name[name].layout)) for name in names}
    if isinstance(layout, _btf.Array):
        return [draw(shaped(layout.elem)) for _i in range(draw(st.integers(0, layout.count)))]
    if isinstance(layout, _btf.Text):
        return draw(st.text(alphabet=string.ascii_letters + " -", max_size=max(layout.size - 1, 0)))
    if isinstance(layout, _btf.Bytes):
        return draw(st.lists(st.integers(0, 255), max_size=layout.size))
    if isinstance(layout, _btf.Enum) and layout.values and draw(st.booleans()):
        return draw(st.sampled_from(sorted(layout.values)))
    low, high = layout.bounds()
    return draw(st.integers(low, high))


def assert_round_trip(layout, raw):
    decoded = layout.decode(raw)
    again = layout.encode(decoded, ENC, "value")
    assert again == raw, (decoded, raw.hex(), again.hex())
    assert layout.decode(again) == decoded
    assert layout.total([raw]) == decoded


@SETTINGS
@given(st.data())
def test_any_value_is_a_clear_error_or_a_round_trip(data):
    layout = data.draw(LAYOUTS)
    value = data.draw(st.one_of(YAML_VALUES, shaped(layout)))
    try:
        raw = layout.encode(value, ENC, "value")
    except _btf.NotationError as exc:
        assert str(exc).startswith("value")
        return
    assert isinstance(raw, bytes) and len(raw) == layout.size
    assert_round_trip(layout, raw)


@SETTINGS
@given(st.data())
def test_any_bytes_decode_to_a_value_that_encodes_back(data):
    layout = data.draw(LAYOUTS)
    raw = data.draw(st.binary(min_size=layout.size, max_size=layout.size))
    decoded = layout.decode(raw)
    encoded = layout.encode(decoded, ENC, "value")
    # Bytes no member covers (padding, a char array's bytes after its text) are not part of the value.
    assert len(encoded) == layout.size and layout.decode(encoded) == decoded
    assert_round_trip(layout, encoded)
