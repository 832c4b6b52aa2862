from trainlab.runs.table import main

main()
