"""The tree decoder against GTS's own code (ShichaoSun/math_seq2tree, its ``src/`` folder named by
``HLGT_GTS_SRC``; skipped without it): with GTS's Prediction / GenerateNode / Merge weights copied
in, the beam search gives what GTS's ``evaluate_tree`` gives wherever GTS's search ends within the
length limit (row 16 of docs/departures.md: GTS may return an unfinished tree there, this decoder
cannot), and the teacher-forced loss is GTS's ``train_tree``'s (eval mode, without num_stack).

    git clone https://github.com/ShichaoSun/math_seq2tree /tmp/gts
    HLGT_GTS_SRC=/tmp/gts pytest tests/test_gts_reference.py

GTS's loops below are its ``evaluate_tree`` and ``train_tree`` after their encoder call, as written
there (one problem at a time for the search); GTS's ByteTensor masks are read as booleans, as
current torch requires."""
import copy
import os
import random
import sys
from pathlib import Path

import pytest
import torch

from hlgt.model.tree_decoder import TreeDecoder

GTS = os.environ.get("HLGT_GTS_SRC", "")
pytestmark = pytest.mark.skipif(not (Path(GTS) / "src" / "models.py").is_file(),
                                reason="needs GTS's code: HLGT_GTS_SRC=<a math_seq2tree checkout>")

H, E, N_OPS, C = 16, 8, 5, 3  # hidden, operator embedding, operators, constants


@pytest.fixture(scope="module")
def gts():
    sys.path.insert(0, GTS)
    try:
        import src.train_and_evaluate as gte
        from src.masked_cross_entropy import masked_cross_entropy
        from src.models import GenerateNode, Merge, Prediction, TreeNode
    finally:
        sys.path.remove(GTS)
    gte.USE_CUDA = False
    return gte, masked_cross_entropy, Prediction, GenerateNode, Merge, TreeNode


def twin_decoders(gts, seed: int):
    """GTS's three modules with random weights (sharpened) and a TreeDecoder holding the same weights."""
    _, _, Prediction, GenerateNode, Merge, _ = gts
    torch.manual_seed(seed)
    predict, generate, merge = Prediction(H, N_OPS, C), GenerateNode(H, N_OPS, E), Merge(H, E)
    dec = TreeDecoder(H, E, N_OPS, C, dropout=0.5)
    with torch.no_grad():
        for m in (predict, generate, merge):
            for p in m.parameters():
                p.mul_(2.0)  # sharper distributions: fewer near-ties
        dec.const_embedding.copy_(predict.embedding_weight[0])
        dec.goal_left.weight.copy_(torch.cat([predict.concat_l.weight, predict.concat_lg.weight]))
        dec.goal_left.bias.copy_(torch.cat([predict.concat_l.bias, predict.concat_lg.bias]))
        dec.goal_right.weight.copy_(torch.cat([predict.concat_r.weight, predict.concat_rg.weight]))
        dec.goal_right.bias.copy_(torch.cat([predict.concat_r.bias, predict.concat_rg.bias]))
        dec.attn.load_state_dict(predict.attn.attn.state_dict())
        dec.attn_score.load_state_dict(predict.attn.score.state_dict())
        dec.ops.load_state_dict(predict.ops.state_dict())
        dec.score.load_state_dict(predict.score.attn.state_dict())
        dec.score_out.load_state_dict(predict.score.score.state_dict())
        dec.op_embedding.load_state_dict(generate.embeddings.state_dict())
        dec.generate.weight.copy_(torch.cat([generate.generate_l.weight, generate.generate_lg.weight,
                                             generate.generate_r.weight, generate.generate_rg.weight]))
        dec.generate.bias.copy_(torch.cat([generate.generate_l.bias, generate.generate_lg.bias,
                                           generate.generate_r.bias, generate.generate_rg.bias]))
        dec.merge.weight.copy_(torch.cat([merge.merge.weight, merge.merge_g.weight]))
        dec.merge.bias.copy_(torch.cat([merge.merge.bias, merge.merge_g.bias]))
    for m in (predict, generate, merge, dec):
        m.eval()
    return predict, generate, merge, dec


def gts_search(gts, modules, memory, problem, num_pos, beam_size=5, max_length=45):
    """GTS's ``evaluate_tree`` after its encoder: (tokens, score, finished)."""
    gte, _, _, _, _, TreeNode = gts
    predict, generate, merge = modules
    encoder_outputs = memory[:, None, :]
    seq_mask = torch.zeros(1, memory.size(0), dtype=torch.bool)
    num_mask = torch.zeros(1, len(num_pos) + C, dtype=torch.bool)
    padding_hidden = torch.zeros(1, H)
    all_nums = gte.get_all_number_encoder_outputs(encoder_outputs, [num_pos], 1, len(num_pos), H)
    beams = [gte.TreeBeam(0.0, [[TreeNode(problem[None])]], [[]], [None], [])]
    for _ in range(max_length):
        current = []
        while beams:
            b = beams.pop()
            if not b.node_stack[0]:
                current.append(b)
                continue
            num_score, op, goal, context, nums = predict(b.node_stack, b.left_childs, encoder_outputs, all_nums,
                                                         padding_hidden, seq_mask, num_mask)
            scores = torch.nn.functional.log_softmax(torch.cat((op, num_score), dim=1), dim=1)
            top_v, top_i = scores.topk(beam_size)
            for tv, ti in zip(top_v.split(1, dim=1), top_i.split(1, dim=1)):
                nodes, embeddings, out = gte.copy_list(b.node_stack), gte.copy_list(b.embedding_stack), \
                    copy.deepcopy(b.out)
                token = int(ti)
                out.append(token)
                nodes[0].pop()
                if token < N_OPS:
                    left, right, label = generate(goal, torch.LongTensor([token]), context)
                    nodes[0].append(TreeNode(right))
                    nodes[0].append(TreeNode(left, left_flag=True))
                    embeddings[0].append(gte.TreeEmbedding(label[0].unsqueeze(0), False))
                else:
                    num = nums[0, token - N_OPS].unsqueeze(0)
                    while embeddings[0] and embeddings[0][-1].terminal:
                        sub = embeddings[0].pop()
                        num = merge(embeddings[0].pop().embedding, sub.embedding, num)
                    embeddings[0].append(gte.TreeEmbedding(num, True))
                left_childs = [embeddings[0][-1].embedding if embeddings[0] and embeddings[0][-1].terminal else None]
                current.append(gte.TreeBeam(b.score + float(tv), nodes, embeddings, left_childs, out))
        beams = sorted(current, key=lambda x: x.score, reverse=True)[:beam_size]
        if all(not b.node_stack[0] for b in beams):
            break
    return beams[0].out, beams[0].score, not beams[0].node_stack[0]


def gts_loss(gts, modules, memory, problem, num_pos, lengths, targets):
    """GTS's ``train_tree`` after its encoder, without num_stack (every gold slot is one quantity)."""
    gte, masked_cross_entropy, _, _, _, TreeNode = gts
    predict, generate, merge = modules
    B, T = memory.shape[:2]
    encoder_outputs = memory.transpose(0, 1)
    seq_mask = torch.tensor([[0] * n + [1] * (T - n) for n in lengths], dtype=torch.bool)
    sizes = [len(p) for p in num_pos]
    widest = max(sizes) + C
    num_mask = torch.tensor([[0] * (n + C) + [1] * (widest - n - C) for n in sizes], dtype=torch.bool)
    padding_hidden = torch.zeros(1, H)
    node_stacks = [[TreeNode(p)] for p in problem.split(1, dim=0)]
    all_nums = gte.get_all_number_encoder_outputs(encoder_outputs, num_pos, B, max(sizes), H)
    target_lengths = [len(t) for t in targets]
    target = torch.LongTensor([t + [0] * (max(target_lengths) - len(t)) for t in targets]).transpose(0, 1)
    embedding_stacks, left_childs, outputs = [[] for _ in range(B)], [None] * B, []
    for t in range(max(target_lengths)):
        num_score, op, goal, context, nums = predict(node_stacks, left_childs, encoder_outputs, all_nums,
                                                     padding_hidden, seq_mask, num_mask)
        step = torch.cat((op, num_score), 1)
        outputs.append(step)
        _, generate_input = gte.generate_tree_input(target[t].tolist(), step, None, N_OPS, -1)
        left, right, label = generate(goal, generate_input, context)
        left_childs = []
        for b, l, r, stack, token, embeddings in zip(range(B), left.split(1), right.split(1), node_stacks,
                                                      target[t].tolist(), embedding_stacks):
            if not stack:
                left_childs.append(None)
                continue
            stack.pop()
            if token < N_OPS:
                stack.append(TreeNode(r))
                stack.append(TreeNode(l, left_flag=True))
                embeddings.append(gte.TreeEmbedding(label[b].unsqueeze(0), False))
            else:
                num = nums[b, token - N_OPS].unsqueeze(0)
                while embeddings and embeddings[-1].terminal:
                    sub = embeddings.pop()
                    num = merge(embeddings.pop().embedding, sub.embedding, num)
                embeddings.append(gte.TreeEmbedding(num, True))
            left_childs.append(embeddings[-1].embedding if embeddings and embeddings[-1].terminal else None)
    return masked_cross_entropy(torch.stack(outputs, dim=1), target.transpose(0, 1).contiguous(), target_lengths)


def random_problems(B: int):
    """B problems' encoder outputs of 3-20 tokens, 1-5 quantities each: (memory, mask, problem, num_pos lists)."""
    lengths = [random.randint(3, 20) for _ in range(B)]
    mask = torch.tensor([[t < n for t in range(max(lengths))] for n in lengths])
    memory = torch.randn(B, max(lengths), H) * mask[:, :, None]
    num_pos = [sorted(random.sample(range(n), random.randint(1, min(5, n)))) for n in lengths]
    return memory, mask, torch.randn(B, H), num_pos, lengths


def random_prefix(leaf_ids: int) -> list[int]:
    def build(k):  # a random tree of k operators in prefix order
        if k == 0:
            return [random.randrange(N_OPS, N_OPS + leaf_ids)]
        left = random.randint(0, k - 1)
        return [random.randrange(N_OPS)] + build(left) + build(k - 1 - left)
    return build(random.randint(0, 6))


@pytest.fixture
def bool_byte_masks(monkeypatch):
    monkeypatch.setattr(torch, "ByteTensor", torch.BoolTensor)  # GTS's masks, as current torch takes them


@pytest.mark.usefixtures("bool_byte_masks")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_beam_search_is_gts_wherever_gts_finishes(gts, seed):
    random.seed(seed)
    *modules, dec = twin_decoders(gts, seed)
    with torch.no_grad():
        memory, mask, problem, num_pos, lengths = random_problems(24)
        Q = max(map(len, num_pos))
        positions = torch.tensor([p + [0] * (Q - len(p)) for p in num_pos])
        present = torch.tensor([[i < len(p) for i in range(Q)] for p in num_pos])
        ours = dec.beam_candidates(memory, mask, problem, positions, present, beam_size=5, max_len=45)
        finished = 0
        for b in range(24):
            tokens, score, done = gts_search(gts, modules, memory[b, :lengths[b]], problem[b], num_pos[b])
            if not done:  # GTS hit the length limit with an unfinished tree (row 16)
                continue
            finished += 1
            assert ours[b][0][0] == tokens and ours[b][0][1] == pytest.approx(score, abs=1e-4), b
    assert finished >= 20


@pytest.mark.usefixtures("bool_byte_masks")
@pytest.mark.parametrize("seed", [0, 1])
def test_the_teacher_forced_loss_is_gts(gts, seed):
    random.seed(seed)
    *modules, dec = twin_decoders(gts, seed)
    with torch.no_grad():
        memory, mask, problem, num_pos, lengths = random_problems(12)
        targets = [random_prefix(C + len(p)) for p in num_pos]
        theirs = gts_loss(gts, modules, memory, problem, num_pos, lengths, targets)
        Q, S = max(map(len, num_pos)), max(map(len, targets))
        out = dec(memory, mask, problem, torch.tensor([p + [0] * (Q - len(p)) for p in num_pos]),
                  torch.tensor([[i < len(p) for i in range(Q)] for p in num_pos]),
                  torch.tensor([t + [0] * (S - len(t)) for t in targets]),
                  torch.tensor([[i < len(t) for i in range(S)] for t in targets]))
        assert float(TreeDecoder.loss(out)) == pytest.approx(float(theirs), abs=1e-5)
