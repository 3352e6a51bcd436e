"""hlgt/model/gru.py: the CPU BiGRU with its own backward equals nn.GRU over a packed batch."""
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from hlgt.model.gru import Packing, Reversal, _nn_bigru, bigru

pytestmark = pytest.mark.usefixtures("one_thread")


def reference(gru: nn.GRU, x, lengths):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h_n = gru(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
    H = gru.hidden_size
    return out[..., :H] + out[..., H:], h_n


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("lengths", [[7, 3, 7, 1, 5], [4, 4, 4], [1]])
def test_outputs_states_and_all_gradients_equal_nn_gru(layers, lengths):
    torch.manual_seed(0)
    gru = nn.GRU(3, 4, num_layers=layers, bidirectional=True, batch_first=True).double()
    lengths = torch.tensor(lengths)
    x = torch.randn(len(lengths), int(lengths.max()) + 1, 3, dtype=torch.double, requires_grad=True)
    w_out, w_h = torch.randn(len(lengths), x.size(1), 4).double(), torch.randn(2 * layers, len(lengths), 4).double()
    # The GPU path (nn.GRU over the packing made ahead, here on the CPU) and a packing made ahead.
    # The causal passes over the padded batch too.
    planned = (lambda gru, x, lengths: _nn_bigru(gru, x, Packing.of(lengths, x.size(1))),
               lambda gru, x, lengths: bigru(gru, x, lengths, packing=Packing.of(lengths, x.size(1))),
               lambda gru, x, lengths: bigru(gru, x, lengths, packing=Reversal.of(lengths, x.size(1))))
    results = []
    for fn in (reference, bigru, *planned):
        gru.zero_grad()
        x.grad = None
        out, h_n = fn(gru, x, lengths)
        ((out * w_out).sum() + (h_n * w_h).sum()).backward()
        results.append((out.detach(), h_n.detach(), x.grad.clone(), [p.grad.clone() for p in gru.parameters()]))
    (ref_out, ref_h, ref_dx, ref_dw), *others = results
    for out, h_n, dx, dw in others:
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(h_n, ref_h)
        torch.testing.assert_close(dx, ref_dx)
        for a, b in zip(dw, ref_dw):
            torch.testing.assert_close(a, b)
        for row, n in enumerate(lengths.tolist()):  # padding stays zero
            assert (out[row, n:] == 0).all()


def test_the_causal_passes_ignore_what_the_padding_holds():
    torch.manual_seed(0)
    gru = nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True).double()
    lengths = torch.tensor([2, 6, 4])
    x = torch.randn(3, 9, 3, dtype=torch.double)
    noisy = x.clone()
    for row, n in enumerate(lengths.tolist()):
        noisy[row, n:] = 100 * torch.randn(9 - n, 3, dtype=torch.double)
    reversal = Reversal.of(lengths, 9)
    assert reversal.index[0].tolist() == [1, 0, 2, 3, 4, 5, 6, 7, 8]
    for a, b in zip(bigru(gru, x, lengths, packing=reversal), bigru(gru, noisy, lengths, packing=reversal)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(bigru(gru, x, lengths, packing=reversal)[0], reference(gru, x, lengths)[0])


def test_inter_layer_dropout_only_in_training():
    torch.manual_seed(0)
    gru = nn.GRU(3, 4, num_layers=2, dropout=0.5, bidirectional=True, batch_first=True)
    x, lengths = torch.randn(2, 5, 3), torch.tensor([5, 2])
    gru.eval()
    torch.testing.assert_close(bigru(gru, x, lengths)[0], reference(gru, x, lengths)[0])
    gru.train()
    assert not torch.allclose(bigru(gru, x, lengths)[0], bigru(gru, x, lengths)[0])


def test_bad_lengths_and_modules_are_refused():
    gru = nn.GRU(3, 4, bidirectional=True, batch_first=True)
    with pytest.raises(ValueError, match="lengths"):
        bigru(gru, torch.randn(2, 3, 3), torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="bidirectional"):
        bigru(nn.GRU(3, 4, batch_first=True), torch.randn(2, 3, 3), torch.tensor([3, 1]))


def test_bfloat16_products_stay_close_and_refuse_training():
    torch.manual_seed(0)
    gru = nn.GRU(16, 32, num_layers=2, bidirectional=True, batch_first=True).eval()
    x, lengths = torch.randn(4, 9, 16), torch.tensor([9, 3, 6, 1])
    with torch.no_grad():
        ref_out, ref_h = reference(gru, x, lengths)
        out, h_n = bigru(gru, x, lengths, low_precision=True)
    assert out.dtype == h_n.dtype == torch.float32
    assert not torch.equal(out, ref_out)  # the products did run in bfloat16
    torch.testing.assert_close(out, ref_out, atol=3e-2, rtol=0)
    torch.testing.assert_close(h_n, ref_h, atol=3e-2, rtol=0)
    assert (out[1, 3:] == 0).all()
    with pytest.raises(ValueError, match="inference"):
        bigru(gru, x, lengths, low_precision=True)
    with torch.no_grad(), pytest.raises(ValueError, match="not a Reversal"):
        bigru(gru, x, lengths, low_precision=True, packing=Reversal.of(lengths, 9))
