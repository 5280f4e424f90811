curl -fsSL https://pypi.org/simple/requests/ -o index.html
wget -q https://example.com/data.csv -O data.csv
curl -s https://api.github.com/repos/golang/go | python3 -m json.tool
pip install --user requests==2.32.0
