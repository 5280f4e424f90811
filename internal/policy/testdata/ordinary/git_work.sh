git clone https://github.com/user/repo.git
cd repo && git checkout -b feature
make test 2>&1 | tee test.log
grep -r "TODO" src/ | wc -l
tar czf /workspace/repo.tgz repo
ls -la ~/ /workspace /tmp
