from blockcli.cli import main

main()
