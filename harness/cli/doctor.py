"""`harness doctor`'s view: the diagnosis as rich tables."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from ..engine.doctor import Diagnosis, Gpu

STATUS = {(True, True): "[green]ok[/green]", (True, False): "[green]ok[/green]",
          (False, True): "[bold red]missing[/bold red]", (False, False): "[yellow]slower[/yellow]"}


def gpu_table(gpus: list[Gpu]) -> Table:
    table = Table(title="GPUs", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("#", "name", "arch", "memory", "driver"):
        table.add_column(column)
    for g in gpus:
        table.add_row(str(g.index), g.name, f"sm_{g.arch.replace('.', '')} ({g.arch})", g.memory, g.driver)
    return table


def checks_table(diagnosis: Diagnosis) -> Table:
    table = Table(title=f"harness doctor (device {diagnosis.device})", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("found", overflow="fold")
    table.add_column("how to fix", overflow="fold")
    for c in diagnosis.checks:
        status = "[yellow]no profiles[/yellow]" if c.name == "ncu" and not c.ok else STATUS[(c.ok, c.needed)]
        if c.name == "GPU" and not diagnosis.gpus and not c.needed:  # nothing to call ok on a CPU run
            status = "[dim]none, not needed[/dim]"
        table.add_row(c.name, status, c.found, "" if c.ok else c.fix)
    return table


def print_diagnosis(console: Console, diagnosis: Diagnosis) -> None:
    if diagnosis.gpus:
        console.print(gpu_table(diagnosis.gpus))
    console.print(checks_table(diagnosis))
    missing = [c.name for c in diagnosis.checks if c.needed and not c.ok]
    if missing:
        console.print(f"[bold red]Not ready for {diagnosis.device}:[/bold red] {', '.join(missing)} "
                      "(see how to fix above).")
    else:
        slower = [c.name for c in diagnosis.problems if c.name != "ncu"]  # ncu costs profiles, not builds
        console.print(f"[green]Ready for {diagnosis.device}.[/green]"
                      + (f" Builds will be slower until fixed: {', '.join(slower)}." if slower else ""))
