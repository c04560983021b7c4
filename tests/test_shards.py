"""`--shard auto`: the variables each job engine sets, read as kvdiag's shard i/n (from 1).

Each case sets the variables the way the engine itself does: Slurm sets the task's id
with the array's COUNT, MIN, MAX and STEP (ids from any MIN, `--array=1-7:2` has a
step); a Kubernetes Indexed Job sets JOB_COMPLETION_INDEX from 0 and no count;
GitLab's `parallel:` sets CI_NODE_INDEX from 1 with CI_NODE_TOTAL, and CI_NODE_TOTAL=1
alone on every other job.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kvdiag.errors import UsageError
from kvdiag.shards import Shard, case_shard, parse_shard, resolve_shard, shard_from_environment


def slurm(spec: str, task: int) -> dict[str, str]:
    """What Slurm sets in task ``task`` of ``--array=spec`` (a range MIN-MAX[:STEP])."""
    ids, _, step = spec.partition(":")
    low, high = (int(x) for x in ids.split("-"))
    step_n = int(step or 1)
    count = len(range(low, high + 1, step_n))
    return {"SLURM_ARRAY_JOB_ID": "4711", "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": str(count),
            "SLURM_ARRAY_TASK_MIN": str(low), "SLURM_ARRAY_TASK_MAX": str(high), "SLURM_ARRAY_TASK_STEP": str(step_n),
            "SLURM_JOB_ID": "4712"}


@pytest.mark.parametrize("spec, task, expected", [
    ("0-3", 0, (1, 4)), ("0-3", 2, (3, 4)), ("0-3", 3, (4, 4)),        # Slurm's own first example: from 0
    ("1-4", 1, (1, 4)), ("1-4", 2, (2, 4)), ("1-4", 4, (4, 4)),        # from 1
    ("10-13", 12, (3, 4)),                                             # from any MIN
    ("1-7:2", 1, (1, 4)), ("1-7:2", 5, (3, 4)), ("1-7:2", 7, (4, 4)),  # with a step
])
def test_a_slurm_array_task_is_its_place_in_the_array(spec, task, expected):
    shard = shard_from_environment(slurm(spec, task))
    assert (shard.index, shard.count, shard.engine) == (*expected, "slurm")
    assert shard.variables["SLURM_ARRAY_TASK_ID"] == str(task)
    assert "SLURM_JOB_ID" not in shard.variables       # only what was read


def test_every_task_of_an_array_is_one_shard_exactly_once():
    for spec in ("0-3", "1-4", "5-11:3", "0-0"):
        ids = range(int(spec.split("-")[0]), int(spec.split(":")[0].split("-")[1]) + 1, int(spec.partition(":")[2] or 1))
        shards = [shard_from_environment(slurm(spec, t)) for t in ids]
        assert sorted(s.index for s in shards) == list(range(1, len(shards) + 1))
        assert {s.count for s in shards} == {len(shards)}


def test_the_issue_s_example_is_shard_3_of_4():
    """`SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=4`, no MIN: ids are taken from 0 (documented)."""
    shard = shard_from_environment({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"})
    assert (shard.text, shard.origin()) == ("3/4", {"engine": "slurm", "variables": {
        "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}})


def test_min_and_max_without_a_count_are_enough():
    env = {"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_MAX": "8"}
    assert shard_from_environment(env).text == "2/4"


@pytest.mark.parametrize("env, words", [
    ({"SLURM_ARRAY_TASK_ID": "2"}, ["SLURM_ARRAY_TASK_ID=2 without a count", "SLURM_ARRAY_TASK_COUNT",
                                     "SLURM_ARRAY_TASK_MIN"]),
    ({"SLURM_ARRAY_TASK_COUNT": "4"}, ["SLURM_ARRAY_TASK_COUNT set but SLURM_ARRAY_TASK_ID is not"]),
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4"},
     ["gives shard 5/4, out of range", "SLURM_ARRAY_TASK_MIN unset: from 0"]),
    # --array=1,4,9: Slurm's MIN/MAX span 9 ids, its COUNT is 3
    ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1",
      "SLURM_ARRAY_TASK_MAX": "9", "SLURM_ARRAY_TASK_STEP": "1"},
     ["SLURM_ARRAY_TASK_COUNT=3 but the ids 1..9 in steps of 1 are 9", "--array=1,4,9", "--shard i/n"]),
    ({**slurm("1-7:2", 1), "SLURM_ARRAY_TASK_ID": "4"}, ["SLURM_ARRAY_TASK_ID=4 is not 1 plus a multiple of "
                                                         "SLURM_ARRAY_TASK_STEP=2"]),
    ({"SLURM_ARRAY_TASK_ID": "two", "SLURM_ARRAY_TASK_COUNT": "4"}, ["SLURM_ARRAY_TASK_ID='two' is not a whole"]),
])
def test_slurm_variables_missing_or_contradictory_are_one_line_naming_them(env, words):
    with pytest.raises(UsageError) as caught:
        shard_from_environment(env)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("--shard auto: ")
    for word in words:
        assert word in message


@pytest.mark.parametrize("index, expected", [("0", "1/4"), ("3", "4/4")])
def test_a_kubernetes_indexed_job_counts_from_0_with_the_manifest_s_count(index, expected):
    shard = shard_from_environment({"JOB_COMPLETION_INDEX": index, "KVDIAG_SHARD_COUNT": "4",
                                    "HOSTNAME": "kvdiag-sweep-0-x7k2p"})
    assert shard.text == expected and shard.engine == "kubernetes"
    assert shard.variables == {"JOB_COMPLETION_INDEX": index, "KVDIAG_SHARD_COUNT": "4"}


@pytest.mark.parametrize("env, words", [
    ({"JOB_COMPLETION_INDEX": "1"}, ["JOB_COMPLETION_INDEX=1 without a count", "set KVDIAG_SHARD_COUNT"]),
    ({"KVDIAG_SHARD_COUNT": "4"}, ["KVDIAG_SHARD_COUNT is set but JOB_COMPLETION_INDEX is not"]),
    ({"JOB_COMPLETION_INDEX": "4", "KVDIAG_SHARD_COUNT": "4"}, ["gives shard 5/4, out of range",
                                                              "JOB_COMPLETION_INDEX counts from 0"]),
])
def test_kubernetes_variables_missing_or_out_of_range(env, words):
    with pytest.raises(UsageError) as caught:
        shard_from_environment(env)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize("index, expected", [("1", "1/4"), ("4", "4/4")])
def test_gitlab_parallel_counts_from_1(index, expected):
    shard = shard_from_environment({"CI_NODE_INDEX": index, "CI_NODE_TOTAL": "4", "CI_JOB_ID": "99"})
    assert shard.text == expected and shard.engine == "gitlab"


@pytest.mark.parametrize("env, words", [
    ({"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "4"}, ["shard 0/4, out of range", "CI_NODE_INDEX counts from 1"]),
    ({"CI_NODE_INDEX": "2"}, ["CI_NODE_INDEX=2 without CI_NODE_TOTAL"]),
    ({"CI_NODE_TOTAL": "4"}, ["CI_NODE_TOTAL=4 but CI_NODE_INDEX is not set"]),
])
def test_gitlab_variables_missing_or_out_of_range(env, words):
    with pytest.raises(UsageError) as caught:
        shard_from_environment(env)
    for word in words:
        assert word in str(caught.value)


def test_a_gitlab_job_without_parallel_is_no_engine():
    """GitLab sets CI_NODE_TOTAL=1 on every job: alone it names no shard, and does not contradict Slurm."""
    with pytest.raises(UsageError, match="no job engine's variables are set"):
        shard_from_environment({"CI_NODE_TOTAL": "1", "CI_JOB_ID": "99"})
    assert shard_from_environment({"CI_NODE_TOTAL": "1", **slurm("0-3", 1)}).text == "2/4"


def test_no_engine_names_every_variable_it_reads():
    with pytest.raises(UsageError) as caught:
        shard_from_environment({"PATH": "/usr/bin"})
    message = str(caught.value)
    for name in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "JOB_COMPLETION_INDEX",
                 "KVDIAG_SHARD_COUNT", "CI_NODE_INDEX", "CI_NODE_TOTAL"):
        assert name in message


def test_two_engines_that_agree_are_one_shard_and_two_that_disagree_are_refused():
    agree = {**slurm("0-3", 2), "CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "4"}
    assert shard_from_environment(agree).text == "3/4"
    disagree = {**slurm("0-3", 2), "JOB_COMPLETION_INDEX": "0", "KVDIAG_SHARD_COUNT": "4"}
    with pytest.raises(UsageError) as caught:
        shard_from_environment(disagree)
    message = str(caught.value)
    assert "slurm says shard 3/4" in message and "kubernetes says 1/4" in message
    assert "JOB_COMPLETION_INDEX=0" in message and "SLURM_ARRAY_TASK_ID=2" in message


def test_resolve_takes_i_n_as_typed_and_auto_from_the_environment():
    assert resolve_shard(None, {}) is None
    assert resolve_shard("2/4", slurm("0-3", 0)) == Shard(2, 4)       # typed wins: the environment is not read
    assert resolve_shard("2/4", {}).origin() is None
    assert resolve_shard("AUTO", slurm("0-3", 0)).text == "1/4"
    with pytest.raises(UsageError, match="i/n .* or auto"):
        resolve_shard("two", {})
    assert parse_shard(" 3 / 4 ") == (3, 4)


def test_a_case_s_shard_is_its_name_s_alone_and_the_shards_share_the_cases():
    cases = [f"hsk={h},nh=4,kv={kv},nb={nb}" for h in (64, 128, 256) for kv in (512, 1024) for nb in (1, 3, 32)]
    for count in (1, 2, 4, 7):
        dealt = {c: case_shard(c, count) for c in cases}
        assert set(dealt.values()) <= set(range(1, count + 1))
        assert dealt == {c: case_shard(c, count) for c in reversed(cases)}     # order and company do not matter
    sizes = Counter(case_shard(f"case{i}", 4) for i in range(4000))
    assert sorted(sizes) == [1, 2, 3, 4] and min(sizes.values()) > 900         # about a quarter each


def test_the_dealing_is_pinned_so_parts_of_two_kvdiag_versions_still_merge():
    """`kvdiag merge` checks every case against `case_shard`: changing the hash would refuse
    the parts of a fleet running two kvdiag versions. These are sha256's first 8 bytes."""
    d2 = ("hsk=256,hsv=256,nh=4,nr23=[4,1],kv=512,nb=3,mask=1,sinks=0,max_bias=0.000000,logit_softcap=0.000000,"
          "prec=f32,type_K=f16,type_V=f16,permute=[0,1,2,3],kv_view=1,v_is_view_of_k=0")
    assert [case_shard(d2, n) for n in (2, 3, 4, 8)] == [2, 1, 4, 8]
