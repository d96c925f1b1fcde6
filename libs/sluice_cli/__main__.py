from sluice_cli.main import main

main()
