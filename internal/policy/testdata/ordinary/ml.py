from sklearn.linear_model import LinearRegression
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
X = [[1], [2], [3]]
y = [2, 4, 6]
m = LinearRegression().fit(X, y)
plt.plot([1, 2, 3], m.predict(X))
plt.savefig("/workspace/plot.png")
import os
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
