"""Prompt templates: what the first prompt must say, and one's own template directory."""
import ast
import json
import re

import pytest

from harness import DeviceInfo, Environment, load_problem
from harness.device import peak_bandwidth
from harness.engine.processes.protocol import ReferenceReady
from harness.integrity.roofline import Peaks
from harness.loop.prompts import (Prompts, PromptError, candidate_template, first_prompt,
                                  system_prompt)

from conftest import REPO
from test_build_idioms import load_inline_keywords

H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0", 3.35)
# as the reference process reports them on an H100
FACTS = dict(facts=ReferenceReady(hardware=["132 SMs, compute capability 9.0; builds target sm_90",
                                            "per SM: 228 KiB shared memory, 65536 registers", "L2 cache: 50 MiB"],
                                  inputs=["`x`: cuda float32 (16, 64, 256, 256), contiguous"],
                                  peaks=Peaks("NVIDIA H100 80GB HBM3", 2950.0, 51.2)),
             environment=Environment("cuda", torch="2.13.0+cu130", cuda="13.0"))


@pytest.fixture
def problem():
    return load_problem(REPO / "problems" / "layernorm_4d.py")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def test_first_prompt_has_problem_rules_hardware_and_the_quick_idiom(problem):
    text = first_prompt(Prompts(), problem, H100, accept=1.5, target=2.0, trials=5, **FACTS)
    assert problem.source.strip() in text
    assert "class ModelNew(nn.Module)" in text and "load_inline" in text
    assert "NVIDIA H100 80GB HBM3" in text and "9.0" in text and "sm_90" in text
    assert "3.35 TB/s" in text
    assert "- 132 SMs, compute capability 9.0; builds target sm_90" in text and "L2 cache: 50 MiB" in text
    assert "2950 GB/s (a device copy" in text and "51.2 TFLOP/s fp32" in text
    assert "- `x`: cuda float32 (16, 64, 256, 256), contiguous" in text
    assert "torch 2.13.0+cu130, CUDA 13.0" in text and "TF32 and lower precision" in text
    assert "The L2 cache is flushed before every timed call" in text and "95% interval" in text
    assert "1.5x is acceptable; 2.0x or more\n  finishes the task" in text
    idiom = python_blocks(text)[-1]
    ast.parse(idiom)  # the example is valid Python
    assert "no_implicit_headers=True" in idiom and "use_pch=True" in idiom
    cuda = idiom.split('cuda_source = r"""')[1].split('"""')[0]
    assert "torch" not in cuda and "cudaStream_t stream" in cuda
    cpp = idiom.split('cpp_source = r"""')[1].split('"""')[0]
    assert cpp.lstrip().startswith("#include <torch/extension.h>")


def test_cpu_device_is_described_without_gpu_figures(problem):
    text = first_prompt(Prompts(), problem, DeviceInfo("cpu", "x86_64", "cpu"), accept=1.5,
                        target=2.0, trials=5, **FACTS)
    assert "x86_64 (CPU)" in text and "TB/s" not in text and "do_bench" not in text


CPU = DeviceInfo("cpu", "x86_64", "cpu")
CPU_FACTS = dict(facts=ReferenceReady(hardware=["2 cores"], inputs=["`x`: cpu float32 (16, 64, 256, 256), contiguous"]),
                 environment=Environment("cpu", torch="2.13.0+cpu"))


def test_on_a_cpu_the_prompts_ask_for_cpp_on_cpu_tensors(problem):
    text = first_prompt(Prompts(), problem, CPU, accept=1.5, target=2.0, trials=5, **CPU_FACTS)
    assert text.startswith("Write a faster version of the PyTorch model below with custom C++ code for the CPU.")
    assert "`cpp_sources` alone" in text and "CUDA" not in text and "cuda_source" not in text
    idiom = python_blocks(text)[-1]
    ast.parse(idiom)
    assert "x.device().is_cpu()" in idiom and "is_cuda" not in idiom and "cuda_sources" not in idiom
    assert system_prompt(Prompts(), cpu=True).startswith("You are a CPU performance engineer")
    assert system_prompt(Prompts()).startswith("You are a CUDA performance engineer")
    template = candidate_template(Prompts(), problem, accept=1.5, target=2.0, cpu=True)
    ast.parse(template)
    assert "x.device().is_cpu()" in template and "cuda" not in template.lower()
    # the GPU prompt keeps its CUDA idiom
    gpu = first_prompt(Prompts(), problem, H100, accept=1.5, target=2.0, trials=5, **FACTS)
    assert "custom CUDA kernels" in gpu and "x.is_cuda()" in gpu and "C++ code for the CPU" not in gpu


def cpu_build(source: str) -> tuple:
    """What a CPU candidate asks of its build: load_inline's extra_cflags and use_pch, and whether its
    C++ asks for optimization by pragma."""
    keywords = load_inline_keywords(ast.parse(source))
    given = {name: ast.literal_eval(keywords[name]) for name in ("extra_cflags", "use_pch") if name in keywords}
    return given.get("extra_cflags"), given.get("use_pch", False), "#pragma GCC optimize" in source


def test_the_cpu_build_advice_is_one_in_the_prompt_the_docs_the_candidates_and_the_header(problem):
    """The fastest build measured (docs/candidates.md, C++ on a CPU), said the same way everywhere: a drift
    in any one place fails here."""
    from harness.engine.building.pch import pch_cflags

    text = first_prompt(Prompts(), problem, CPU, accept=1.5, target=2.0, trials=5, **CPU_FACTS)
    advised = cpu_build(python_blocks(text)[-1])
    assert advised == (["-O3"], True, False)
    assert f"`extra_cflags={json.dumps(advised[0])}` and `use_pch=True`" in text  # the prose names the same
    assert pch_cflags("cpu") == advised[0]  # torch's header is made with the flags the candidates pass
    documented = [block for block in python_blocks((REPO / "docs" / "candidates.md").read_text())
                  if "load_inline" in block and "cuda_sources" not in block]
    assert documented and [cpu_build(block) for block in documented] == [advised] * len(documented)
    candidates = {path.name: path.read_text() for path in (REPO / "tests" / "candidates").glob("*.py")}
    cpu = {name: cpu_build(source) for name, source in candidates.items()
           if "load_inline(" in source and "cuda_sources" not in source}
    assert len(cpu) >= 4 and cpu == dict.fromkeys(cpu, advised)


def test_the_cpu_idiom_builds_and_is_correct(tmp_path, cpu_options):
    """The example the CPU prompt gives, as a candidate for x * 2: built by a real compiler."""
    from harness import Verdict, evaluate

    candidate = tmp_path / "cpu_idiom.py"
    # as given, with the precompiled header: made once per torch install, with the flags every C++ test candidate passes
    idiom = Prompts().render("idiom_cpu.py.j2")
    candidate.write_text(idiom + "\n\nclass ModelNew(nn.Module):\n"
                         "    def forward(self, x):\n        return scale_ext.scale(x, 2.0)\n")
    result = evaluate(REPO / "tests" / "problems" / "sweep" / "level1" / "1_scale.py", candidate, cpu_options)
    assert result.verdict is Verdict.CORRECT, result.explanation
    print(f"the CPU idiom built in {result.build.seconds:.1f} s")


def test_tolerances_set_by_the_problem_are_stated(tmp_path):
    path = tmp_path / "tol.py"
    path.write_text("ATOL = 0.01\nRTOL = 0.001\nclass Model: pass\n"
                    "def get_inputs(): return []\ndef get_init_inputs(): return []\n")
    text = first_prompt(Prompts(), load_problem(path), H100, accept=1.5, target=2.0, trials=5, **FACTS)
    assert "atol=0.01, rtol=0.001" in text


def test_candidate_template_is_python_defining_modelnew(problem):
    text = candidate_template(Prompts(), problem, accept=1.5, target=2.0)
    tree = ast.parse(text)
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def test_own_directory_overrides_some_templates_and_falls_back_for_the_rest(tmp_path, problem):
    (tmp_path / "system.j2").write_text("Be brief.")
    prompts = Prompts(tmp_path)
    assert system_prompt(prompts) == "Be brief."
    assert "## Rules" in first_prompt(prompts, problem, H100, accept=1.5, target=2.0, trials=5, **FACTS)


def test_template_errors_name_the_file(tmp_path, problem):
    (tmp_path / "first.j2").write_text("{{ problem.source }} {{ gpu_name }}")
    with pytest.raises(PromptError, match=r"first\.j2 uses a name the harness does not provide"):
        first_prompt(Prompts(tmp_path), problem, H100, accept=1.5, target=2.0, trials=5, **FACTS)
    (tmp_path / "first.j2").write_text("{% if %}")
    with pytest.raises(PromptError, match=r"first\.j2 has a syntax error at line 1"):
        first_prompt(Prompts(tmp_path), problem, H100, accept=1.5, target=2.0, trials=5, **FACTS)


def test_bad_directories_are_clear_errors(tmp_path):
    with pytest.raises(PromptError, match="does not exist"):
        Prompts(tmp_path / "missing")
    with pytest.raises(PromptError, match="holds none of the templates"):
        Prompts(tmp_path)


def test_bandwidth_lookup_prefers_specific_names():
    assert peak_bandwidth("NVIDIA H100 PCIe") == 2.0
    assert peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35
    assert peak_bandwidth("NVIDIA GH200 480GB") == 4.0
    assert peak_bandwidth("NVIDIA L4") == 0.3 and peak_bandwidth("NVIDIA L40S") == 0.864
    assert peak_bandwidth("Some Future GPU") is None


def test_the_first_prompt_says_the_reference_draws_random_numbers(problem):
    cpu = DeviceInfo("cpu", "x86_64", "cpu")
    dropout = load_problem(REPO / "tests" / "problems" / "dropout_train.py")
    assert dropout.random_draws == ["Dropout"]
    text = first_prompt(Prompts(), dropout, cpu, accept=1.5, target=2.0, trials=5, **FACTS)
    assert "The reference draws random numbers (Dropout" in text
    assert "random numbers" not in first_prompt(Prompts(), problem, cpu, accept=1.5, target=2.0, trials=5, **FACTS)


def test_backward_first_prompt_gives_the_autograd_contract(problem):
    text = first_prompt(Prompts(), problem, H100, accept=1.5, target=2.0, trials=5, backward=True, **FACTS)
    assert "## Forward and backward" in text and "torch.autograd.Function" in text
    assert "within atol=rtol=1e-4 for float32 outputs" in text.split("## Forward and backward")[1]
    assert "rounding" not in text  # none measured
    widened = ReferenceReady(**{**FACTS["facts"].__dict__, "grad_allowance": {"gradient of parameter weight": 0.012}})
    text_widened = first_prompt(Prompts(), problem, H100, accept=1.5, target=2.0, trials=5, backward=True,
                                **{**FACTS, "facts": widened})
    assert "each gradient's atol plus the reference's own float32 rounding (measured against float64; at most " \
           "0.012)" in text_widened
    assert "Do not write into `grad_out`" in text
    sketch = [block for block in python_blocks(text) if "autograd.Function" in block][0]
    ast.parse("\n".join(line[2:] for line in sketch.splitlines()))  # the sketch is valid Python
    assert "## Forward and backward" not in first_prompt(Prompts(), problem, H100, accept=1.5, target=2.0,
                                                         trials=5, **FACTS)


def test_the_cpu_first_prompt_says_which_threads_and_where_the_time_goes(problem):
    import re

    from harness.integrity.roofline import Headroom
    from test_feedback import GPU_WORDS

    text = first_prompt(Prompts(), problem, CPU, accept=1.5, target=2.0, trials=5,
                        headroom=Headroom(0.1487, 0.00349), **CPU_FACTS)
    assert "`torch.set_num_threads(1)`" in text and "do not start threads of your own" in text
    assert "a call that does nothing takes 0.0035 ms here, 2% of the reference's 0.1487 ms" in text
    assert not GPU_WORDS.search(text), GPU_WORDS.search(text)
    # on a GPU the line is there only where the reference is host-bound
    gpu = H100
    assert "Where the time goes" not in first_prompt(Prompts(), problem, gpu, accept=1.5, target=2.0, trials=5,
                                                     headroom=Headroom(0.5, 0.01), **FACTS)
    bound = first_prompt(Prompts(), problem, gpu, accept=1.5, target=2.0, trials=5,
                         headroom=Headroom(0.02, 0.012), **FACTS)
    assert re.search(r"60% of the reference's 0.02 ms: the reference is host-bound", bound)
