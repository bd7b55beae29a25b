from dedupdb.cli.commands import main

main()
