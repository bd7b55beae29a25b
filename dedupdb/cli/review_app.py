"""`dedupdb review`: a full-screen terminal review of the duplicate groups (Textual), over ops/review.py.

Imported only by the review command: Textual loads when a review starts, never for another command. The
screen holds no decision of its own: keeper, marks, plans, acting and undo are the Review's."""

from __future__ import annotations

import os
import shlex
import subprocess
from datetime import datetime
from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, ProgressBar, Static

from dedupdb.cli.render import diff_sides, human_bytes, shorten
from dedupdb.database import Cluster
from dedupdb.errors import DedupError
from dedupdb.ops.review import Review, Row

PAGE = 40  # groups listed at first, and more each time the cursor nears the end of the list
# What the other columns of a table take: the path gets the rest, its middle giving way (the file name and a
# record's #id stay), so that a row fits an 80-column terminal.
GROUP_COLUMNS = 34
MEMBER_COLUMNS = 52

CSS = """
Screen { layout: vertical; }
#title { height: 1; background: $primary; color: $text; padding: 0 1; }
#filter { height: 1; border: none; padding: 0 1; margin: 0; }
#groups { height: 1fr; }
#members { height: auto; max-height: 45%; }
#diff { height: 1fr; border-top: solid $primary; }
#status { height: 1; padding: 0 1; color: $text-muted; }
ModalScreen { align: center middle; }
.dialog { width: 90%; max-width: 100; height: auto; max-height: 90%; border: thick $primary; background: $surface;
          padding: 0 1; }
.dialog DataTable { height: auto; max-height: 16; }
"""


def _when(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9).strftime("%Y-%m-%d %H:%M")


def _label(member) -> str:
    return member.key


class HelpScreen(ModalScreen):
    """Every key of the review, by screen."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        table = Table("key", "what it does", box=None, show_header=False, pad_edge=False)
        for screen, bindings in (("Groups", GroupsScreen.BINDINGS), ("A group", GroupScreen.BINDINGS),
                                 ("Everywhere", ReviewApp.BINDINGS)):
            table.add_row(Text(screen, style="bold"), "")
            for b in bindings:
                table.add_row(b.key.replace("question_mark", "?").replace(",", " "), b.description)
        with VerticalScroll(classes="dialog"):
            yield Static(table)


class ConfirmScreen(ModalScreen):
    """The plan the marks make, before anything happens: files and bytes; t, m, l choose the action."""

    BINDINGS = [
        Binding("y,enter", "confirm", "carry it out"),
        Binding("t", "choose('trash')", "trash"),
        Binding("m", "choose('move')", "move"),
        Binding("l", "choose('hardlink')", "hard link"),
        Binding("escape,n", "dismiss(None)", "cancel"),
    ]

    def __init__(self, review: Review, action: str, to: str | None) -> None:
        super().__init__()
        self.review, self.action, self.to = review, action, to
        self.plan = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(id="summary")
            yield Input(value=self.to or "", placeholder="folder to move the files into, then enter", id="folder")
            yield DataTable(id="steps", cursor_type="row", zebra_stripes=True)
            yield ProgressBar(id="progress", show_eta=False)

    def on_mount(self) -> None:
        self.query_one("#progress").display = False
        self._replan()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """The folder a move goes to, typed here: the plan is made again for it, and y carries it out."""
        event.stop()
        folder = event.value.strip()
        self.to = str(Path(folder).expanduser()) if folder else None
        self._replan()
        self.query_one("#steps", DataTable).focus()

    def _replan(self) -> None:
        summary = self.query_one("#summary", Static)
        steps = self.query_one("#steps", DataTable)
        steps.clear(columns=True)
        folder = self.query_one("#folder", Input)
        folder.display = self.action == "move"
        if self.action == "move" and not self.to:
            self.plan = None
            summary.update("Move: type the folder to move the files into, then enter (esc cancels).")
            folder.focus()
            return
        self.plan = self.review.plan(self.action, self.to)
        where = f" to {self.to}" if self.action == "move" else ""
        text = Text.assemble(
            (f"{self.action}{where}: ", "bold"),
            f"{len(self.plan.steps)} files, {human_bytes(self.plan.reclaimable_bytes)}",
            f" ({len(self.plan.passed_over)} marked left alone)" if self.plan.passed_over else "",
            "\nEach file is checked to hold the bytes seen before it is touched; every action is journaled "
            "and 'u' undoes it.\ny carry it out · t trash · m move · l hard link · esc cancel",
        )
        summary.update(text)
        steps.focus()  # y and enter act on the plan, not in the folder's field
        steps.add_columns("file", "size", "keeps")
        for step in self.plan.steps:
            steps.add_row(shorten(step.remove.path, 40), human_bytes(step.remove.size), shorten(step.keep.path, 30))
        for path, why in self.plan.passed_over:
            steps.add_row(Text(shorten(path, 40), style="dim"), "", Text(why, style="dim"))

    def action_choose(self, action: str) -> None:
        self.action = action
        self._replan()

    def action_confirm(self) -> None:
        if self.plan is None or not self.plan.steps:
            self.app.bell()
            return
        bar = self.query_one("#progress", ProgressBar)
        bar.display = True
        bar.update(total=len(self.plan.steps), progress=0)
        self.run_worker(self._carry_out, thread=True, exclusive=True)

    def _carry_out(self) -> None:
        bar = self.query_one("#progress", ProgressBar)

        def progress(done: int, total: int) -> None:
            self.app.call_from_thread(bar.update, progress=done)

        try:
            outcome = self.review.act(self.plan, progress)
        except DedupError as exc:
            self.app.call_from_thread(self.dismiss, str(exc))
            return
        self.app.call_from_thread(self.dismiss, outcome)


class JournalScreen(ModalScreen):
    """The cleanup journal, newest first; u undoes the latest batch."""

    BINDINGS = [Binding("u", "undo", "undo the latest"), Binding("escape,q", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Journal, newest first · u undo the latest batch · esc close")
            yield DataTable(id="batches", cursor_type="row")

    def on_mount(self) -> None:
        self._fill()

    def _fill(self) -> None:
        table = self.query_one("#batches", DataTable)
        table.clear(columns=True)
        table.add_columns("batch", "action", "entries", "undone")
        for batch, created, action, target, undone, counts in self.app.review.journal():
            entries = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            table.add_row(str(batch), action + (f" → {shorten(target, 20)}" if target else ""), entries,
                          "yes" if undone else "")

    def action_undo(self) -> None:
        self.app.undo()
        self._fill()


class GroupsScreen(Screen):
    """The groups of `report`, the most reclaimable first, read a page at a time; a filter as you type."""

    BINDINGS = [
        Binding("enter", "open", "open", show=False),
        Binding("slash", "filter", "filter"),
        Binding("space", "mark_group", "mark group"),
        Binding("n", "not_duplicates", "not duplicates"),
        Binding("x", "act", "act"),
        Binding("u", "undo", "undo"),
        Binding("j", "journal", "journal"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield Input(placeholder="/ filter by path or text", id="filter")
        yield DataTable(id="groups", cursor_type="row", zebra_stripes=True)
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#groups", DataTable)
        table.add_column("kind", key="kind")
        table.add_column("files", key="files")
        table.add_column("frees", key="frees")
        table.add_column("marked", key="marked")
        table.add_column("keeps", key="keeps")
        self.reload()
        table.focus()

    @property
    def review(self) -> Review:
        return self.app.review

    def reload(self) -> None:
        """List the groups again from the first (after a filter, an action, an undo or an ignore)."""
        table = self.query_one("#groups", DataTable)
        row = table.cursor_row
        table.clear()
        self.shown: list[Cluster] = []
        self._more(PAGE)
        if self.shown:
            table.move_cursor(row=min(row, len(self.shown) - 1))
        self._title()

    def _more(self, count: int) -> None:
        table = self.query_one("#groups", DataTable)
        groups = self.review.pages.upto(count)
        for group in groups[len(self.shown):]:
            table.add_row(*self._cells(group), key=str(len(self.shown)))
            self.shown.append(group)
        self._title()

    def _cells(self, group: Cluster) -> list:
        marked = len(self.review.decision(group).marked)
        keeper = next(m for m in group.members if m.key == self.review.decision(group).keeper)
        return [group.kind, str(len(group.members)), human_bytes(group.reclaimable_bytes),
                str(marked) if marked else "",
                Text(shorten(keeper.key, max(16, self.app.size.width - GROUP_COLUMNS)), no_wrap=True)]

    def refresh_row(self, index: int) -> None:
        table = self.query_one("#groups", DataTable)
        for column, value in zip(("kind", "files", "frees", "marked", "keeps"), self._cells(self.shown[index])):
            table.update_cell(str(index), column, value)
        self._title()

    def _title(self) -> None:
        pages = self.review.pages
        count = f"{len(self.shown)} groups" + ("" if pages.complete else "+")
        mode = " · read-only: reviews but cannot act" if self.review.readonly else ""
        marked = self.review.marked_count()
        self.query_one("#title", Static).update(
            Text(f"dedupdb review · {count} · {marked} marked{mode} · ? help", no_wrap=True, overflow="ellipsis")
        )

    def _current(self) -> Cluster | None:
        table = self.query_one("#groups", DataTable)
        if not self.shown:
            return None
        return self.shown[min(table.cursor_row, len(self.shown) - 1)]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.cursor_row >= len(self.shown) - 5 and not self.review.pages.complete:
            self._more(len(self.shown) + PAGE)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.review.filter(event.value)
        self.reload()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.query_one("#groups", DataTable).focus()

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_open(self) -> None:
        group = self._current()
        if group is not None:
            self.app.push_screen(GroupScreen(group), lambda _: self.reload())

    def action_mark_group(self) -> None:
        group = self._current()
        if group is None:
            return
        marked = bool(self.review.decision(group).marked)
        count = self.review.mark_group(group, not marked)
        self.app.say(f"{count} members marked in this group")
        self.refresh_row(self.shown.index(group))

    def action_not_duplicates(self) -> None:
        group = self._current()
        if group is not None and self.app.writable():
            self.app.ignore([m.key for m in group.members])
            self.reload()

    def action_act(self) -> None:
        self.app.act(self.reload)

    def action_undo(self) -> None:
        self.app.undo()
        self.reload()

    def action_journal(self) -> None:
        self.app.push_screen(JournalScreen(), lambda _: self.reload())


class GroupScreen(Screen):
    """One group: its members against the one kept, and the difference of the highlighted one to it."""

    BINDINGS = [
        Binding("escape", "back", "back"),
        Binding("k", "keep", "keep this"),
        Binding("space", "mark", "mark"),
        Binding("a", "mark_group", "mark all"),
        Binding("f", "mark_folder", "mark folder"),
        Binding("n", "not_duplicate", "not a duplicate"),
        Binding("N", "not_duplicates", "none are", show=False),
        Binding("e", "edit", "editor"),
        Binding("p", "page", "pager", show=False),
        Binding("x", "act", "act"),
        Binding("u", "undo", "undo", show=False),
    ]

    def __init__(self, group: Cluster) -> None:
        super().__init__()
        self.group = group
        self.rows: list[Row] = []

    @property
    def review(self) -> Review:
        return self.app.review

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield DataTable(id="members", cursor_type="row", zebra_stripes=True)
        with VerticalScroll(id="diff"):
            yield Static(id="difftext")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#members", DataTable)
        for name in ("", "keep", "similar", "size", "time", "path"):
            table.add_column(name, key=name or "mark")
        self._fill()
        table.focus()

    def _fill(self, cursor: str | None = None) -> None:
        table = self.query_one("#members", DataTable)
        self.rows = self.review.rows(self.group)
        table.clear()
        for row in self.rows:
            m = row.member
            similarity = "same" if row.exact else ("—" if row.similarity is None else f"{row.similarity:.2f}")
            style = "dim" if row.why_not and not row.keeper else ""
            table.add_row(
                "✓" if row.marked else ("·" if row.why_not is None else " "),
                Text("keep", style="bold") if row.keeper else "",
                similarity, human_bytes(m.bytes), _when(m.mtime_ns),
                Text(shorten(m.key, max(16, self.app.size.width - MEMBER_COLUMNS)), style=style, no_wrap=True),
                key=m.key,
            )
        if cursor is not None:
            table.move_cursor(row=next((i for i, r in enumerate(self.rows) if r.member.key == cursor), 0))
        decision = self.review.decision(self.group)
        self.query_one("#title", Static).update(Text(
            f"group {self.group.id}.{self.group.group} · {self.group.kind} · {len(self.rows)} files · "
            f"{len(decision.marked)} marked · esc back · ? help", no_wrap=True, overflow="ellipsis",
        ))
        self._show_diff()

    def _row(self) -> Row:
        table = self.query_one("#members", DataTable)
        return self.rows[min(table.cursor_row, len(self.rows) - 1)]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_diff()

    def _show_diff(self) -> None:
        if not self.rows:
            return
        from dedupdb.text.diff import diff_texts

        row, keeper = self._row(), self.rows[0]
        target = self.query_one("#difftext", Static)
        status = self.query_one("#status", Static)
        status.update(Text(row.why_not or "", no_wrap=True, overflow="ellipsis") if not row.keeper else "")
        if row.keeper:
            target.update(Text("The copy kept. Choose another member to see how it differs from this one.",
                               style="italic"))
            return
        try:
            _, text_a = self.app.texts(keeper.member.key)
            _, text_b = self.app.texts(row.member.key)
        except DedupError as exc:
            target.update(Text(str(exc), style="italic"))
            return
        result = diff_texts(text_a, text_b)
        left, right = diff_sides(result)
        table = Table(expand=True, box=None, padding=(0, 1), show_edge=False)
        table.add_column(Text(f"kept · {result.ratio:.0%} in common by {result.unit}", style="bold"), ratio=1,
                         overflow="fold")
        table.add_column(Text(f"this · {len(result.changes)} changes", style="bold"), ratio=1, overflow="fold")
        table.add_row(left, right)
        target.update(table)

    def action_back(self) -> None:
        self.dismiss(None)

    def action_keep(self) -> None:
        row = self._row()
        if row.member.record is not None:
            self.app.say("a record cannot be the copy kept by a cleanup of files", error=True)
            return
        self.review.keep_member(self.group, row.member.key)
        self._fill(cursor=row.member.key)

    def action_mark(self) -> None:
        row = self._row()
        why = self.review.toggle_mark(self.group, row.member.key)
        if why:
            self.app.say(why, error=True)
        self._fill(cursor=row.member.key)

    def action_mark_group(self) -> None:
        marked = bool(self.review.decision(self.group).marked)
        self.review.mark_group(self.group, not marked)
        self._fill(cursor=self._row().member.key)

    def action_mark_folder(self) -> None:
        row = self._row()
        folder = str(Path(row.member.path).parent)
        count = self.review.mark_folder(folder)
        self.app.say(f"{count} members under {folder} marked in every group")
        self._fill(cursor=row.member.key)

    def action_not_duplicate(self) -> None:
        row = self._row()
        if row.keeper:
            self.app.say("choose another member: it is declared not a duplicate of the copy kept", error=True)
            return
        if self.app.writable():
            self.app.ignore([self.rows[0].member.key, row.member.key])
            self.dismiss(None)

    def action_not_duplicates(self) -> None:
        if self.app.writable():
            self.app.ignore([r.member.key for r in self.rows])
            self.dismiss(None)

    def action_edit(self) -> None:
        self.app.open_external(os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi", self._row().member.path)

    def action_page(self) -> None:
        self.app.open_external(os.environ.get("PAGER") or "less", self._row().member.path)

    def action_act(self) -> None:
        self.app.act(lambda: self.dismiss(None))

    def action_undo(self) -> None:
        self.app.undo()
        self.dismiss(None)


class ReviewApp(App):
    """The review: a list of groups, a group, and the dialogs to act, undo and get help."""

    CSS = CSS
    TITLE = "dedupdb review"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("question_mark", "help", "help"),
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
    ]

    def __init__(self, review: Review, action: str = "trash", to: str | None = None) -> None:
        super().__init__()
        self.review, self.action, self.to = review, action, to
        self._texts: dict[str, tuple[str, str]] = {}
        self.last_outcome = None

    def on_mount(self) -> None:
        self.push_screen(GroupsScreen())

    def texts(self, key: str) -> tuple[str, str]:
        """A document's text read back from its source (kept while the review lasts: moving the cursor is free)."""
        if key not in self._texts:
            self._texts[key] = self.review.db.document_text(key)
        return self._texts[key]

    def say(self, message: str, error: bool = False) -> None:
        self.notify(message, severity="error" if error else "information", timeout=4)

    def writable(self) -> bool:
        if self.review.readonly:
            self.say("the database is open read-only: this review can look but not act", error=True)
            return False
        return True

    def ignore(self, keys: list[str]) -> None:
        try:
            added = self.review.not_duplicates(keys)
        except DedupError as exc:
            self.say(str(exc), error=True)
            return
        self.say(f"{added} pairs declared not duplicates ('dedupdb unignore' takes them back)")

    def act(self, then) -> None:
        if not self.writable():
            return
        if not self.review.marked_count():
            self.say("nothing is marked: space marks a group, or a member in a group", error=True)
            return
        action = "move" if self.to and self.action == "trash" else self.action

        def done(outcome) -> None:
            if outcome is None:
                return
            if isinstance(outcome, str):
                self.say(outcome, error=True)
            else:
                self.last_outcome = outcome
                self.say(f"{len(outcome.done)} done, {len(outcome.skipped)} skipped, {len(outcome.failed)} failed, "
                         f"{len(outcome.refused)} refused · batch {outcome.batch} · u undoes it",
                         error=bool(outcome.failed or outcome.refused))
            self._texts.clear()
            then()

        self.push_screen(ConfirmScreen(self.review, action, self.to), done)

    def undo(self) -> None:
        if not self.writable():
            return
        try:
            outcome = self.review.undo()
        except DedupError as exc:
            self.say(str(exc), error=True)
            return
        self._texts.clear()
        self.last_outcome = outcome
        cannot = f", {len(outcome.cannot)} could not be" if outcome.cannot else ""
        self.say(f"batch {outcome.batch} undone: {len(outcome.restored)} files back{cannot}", error=bool(outcome.cannot))

    def open_external(self, command: str, path: str) -> None:
        """Open a member's file in the editor or pager, the screen handed over to it meanwhile."""
        from textual.app import SuspendNotSupported

        argv = [*shlex.split(command), path]
        try:
            with self.suspend():
                self._run(argv)
        except SuspendNotSupported:  # no terminal to hand over (a headless run): run it all the same
            self._run(argv)
        self._texts.clear()
        self.refresh()

    def _run(self, argv: list[str]) -> None:
        try:
            subprocess.run(argv, check=False)
        except OSError as exc:
            self.say(f"cannot run {escape(argv[0])}: {exc.strerror or exc}", error=True)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())


def run_review(review: Review, action: str = "trash", to: str | None = None) -> None:
    ReviewApp(review, action, to).run()
