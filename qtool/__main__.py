from qtool.entry import main

main()
