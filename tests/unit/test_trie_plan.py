"""Planning passes of the trie engine: pure functions, no model."""

from hypothesis import given
from hypothesis import strategies as st

from decide.prompts import TokenizedQuestion
from decide.scoring.trie import common_prefix_length, plan_jobs


def tq(prompt_len: int, cand_lens: list[int]) -> TokenizedQuestion:
    return TokenizedQuestion(tuple(range(prompt_len)), tuple(tuple([7] * n) for n in cand_lens))


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix_length([[5], [6]]) == 0
    assert common_prefix_length([[1, 2, 3]]) == 3


def test_small_questions_share_one_pass():
    passes = plan_jobs([tq(10, [2, 2]), tq(12, [3, 3, 3])], prefix_len=8, max_nodes=100)
    assert [[(j.question, j.candidates, j.split) for j in p] for p in passes] == [
        [(0, (0, 1), False), (1, (0, 1, 2), False)]
    ]


def test_a_question_bigger_than_a_pass_is_cut_by_candidates():
    passes = plan_jobs([tq(10, [4] * 10)], prefix_len=8, max_nodes=10)  # room: 10 - 2 = 8 → 2 candidates a job
    jobs = [j for p in passes for j in p]
    assert [j.candidates for j in jobs] == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]
    assert all(j.split for j in jobs)


@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.lists(st.integers(1, 9), min_size=1, max_size=30)), min_size=1, max_size=12
    ),
    st.integers(1, 80),
)
def test_every_candidate_is_planned_exactly_once(spec, max_nodes):
    questions = [tq(p + 1, c) for p, c in spec]
    passes = plan_jobs(questions, prefix_len=1, max_nodes=max_nodes)
    planned = sorted((j.question, c) for p in passes for j in p for c in j.candidates)
    assert planned == [(qi, c) for qi, q in enumerate(questions) for c in range(len(q.candidates))]
    for p in passes:  # a pass only exceeds the budget when a single job alone does
        cost = sum(j.cost(questions[j.question], 1) for j in p)
        assert cost <= max_nodes or len(p) == 1
