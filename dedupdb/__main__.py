from dedupdb.cli.commands import run

run()
