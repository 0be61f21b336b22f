from relaybatch.cli import main

main()
