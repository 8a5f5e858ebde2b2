from tidecd.cli import main

main()
